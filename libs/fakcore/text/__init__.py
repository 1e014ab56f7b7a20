"""The text layer: tokenizers, chat templates, tool-call parsing, constrained decoding."""

from .byte_tokenizer import ByteTokenizer
from .chat import ChatTemplate, ChatTemplateError
from .constrain import Grammar, GrammarError
from .stream_decode import StreamDecoder
from .tokenizer import Tokenizer, TokenizerError
from .toolcalls import ParsedCall, StreamEvent, ToolCallStreamer, detect_style, parse_tool_calls

__all__ = [
    "ByteTokenizer",
    "ChatTemplate",
    "ChatTemplateError",
    "Grammar",
    "GrammarError",
    "ParsedCall",
    "StreamDecoder",
    "StreamEvent",
    "Tokenizer",
    "TokenizerError",
    "ToolCallStreamer",
    "detect_style",
    "parse_tool_calls",
]
