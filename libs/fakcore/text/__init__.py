"""The text layer: tokenizers, chat templates, tool-call parsing, constrained decoding."""

from .chat import ChatTemplate, ChatTemplateError
from .constrain import Constraint, ConstraintError
from .tokenizer import ByteTokenizer, StreamDecoder, Tokenizer, TokenizerError
from .toolcalls import ParsedCall, StreamEvent, ToolCallStreamer, detect_style, parse_tool_calls

__all__ = [
    "ByteTokenizer",
    "ChatTemplate",
    "ChatTemplateError",
    "Constraint",
    "ConstraintError",
    "ParsedCall",
    "StreamDecoder",
    "StreamEvent",
    "Tokenizer",
    "TokenizerError",
    "ToolCallStreamer",
    "detect_style",
    "parse_tool_calls",
]
