"""The bus protocol: every message round-trips, carries its schema version, and tolerates unknown fields."""

from __future__ import annotations

import typing

import msgspec
import msgspec.inspect as mi
import pytest

from fakcore import protocol as p

SAMPLES = [
    p.GenerateRequest(request_id="r1", model="synthetic", messages=[p.ChatMessage(role="user", content="hi")],
                      tools=[p.ToolSpec(name="t", parameters={"type": "object"})], sampling=p.Sampling(max_tokens=3, stop=["x"])),
    p.Accepted(request_id="r1", receipt=p.Receipt(engine="fak-cpu", worker="w", backend="reference", device="cpu", model="m",
                                                   weights_digest="d"), queued=2, prompt_tokens=5),
    p.TokenChunk(request_id="r1", seq=0, text="é", token_ids=[1, 2]),
    p.GenerateDone(request_id="r1", seq=3, finish_reason="stop", usage=p.Usage(prompt_tokens=4, completion_tokens=2),
                   receipt=p.Receipt(engine="fak-cpu", worker="w", backend="reference", device="cpu", model="m", weights_digest="d"),
                   tool_calls=[p.ToolCall(id="c", name="f", arguments="{}")], stop_sequence="x"),
    p.GenerateError(request_id="r1", code=p.ErrorCode.OVERLOADED, message="busy"),
    p.CancelRequest(request_id="r1"),
    p.CountTokensRequest(model="m", prompt="abc"),
    p.CountTokensReply(input_tokens=7),
    p.Announce(worker="w", model="m", engine="fak-cpu", backend="numba", device="cpu", weights_digest="d", context_length=8,
               capacity=4, active=1, queued=0),
    p.Heartbeat(service="kvmmu", instance="i"),
    p.AdjudicateCall(request_id="r", tool="shell", arguments='{"cmd": "ls"}', tainted=True),
    p.CallVerdict(allow=False, rule="tools.shell", reason="no"),
    p.AdjudicateResult(request_id="r", tool="web", content="text", block=p.block_id("text")),
    p.ResultVerdict(block="b", verdict="quarantine", detector="role_marker", score=0.9),
    p.QuarantineVerdict(block="b", detector="d", score=1.0),
    p.KvSpans(worker="w", sequence="s", spans=[p.Span(block="b", start=1, end=5)], length=9),
    p.KvStatsRequest(worker="w"),
    p.KvStats(workers=[p.KvWorkerStats(worker="w", sequences=1, tokens=9, spans=1)], blocks=1),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip_and_version(msg):
    data = p.encode(msg)
    raw = msgspec.msgpack.decode(data)
    assert raw["t"] == type(msg).__name__ and raw["v"] == p.SCHEMA_VERSION
    assert msgspec.msgpack.decode(data, type=type(msg)) == msg


def test_union_decoders_dispatch_by_tag():
    replies = [m for m in SAMPLES if isinstance(m, p.Accepted | p.TokenChunk | p.GenerateDone | p.GenerateError)]
    for m in replies:
        assert p.Decoders.engine_reply.decode(p.encode(m)) == m


def test_unknown_fields_are_ignored_by_older_readers():
    newer = msgspec.msgpack.encode({"t": "TokenChunk", "v": 2, "request_id": "r", "seq": 1, "text": "a",
                                    "field_from_the_future": {"x": [1, 2]}})
    chunk = p.Decoders.engine_reply.decode(newer)
    assert isinstance(chunk, p.TokenChunk) and chunk.text == "a" and chunk.v == 2


def test_missing_required_field_is_an_error():
    with pytest.raises(msgspec.ValidationError, match="request_id"):
        p.Decoders.engine_reply.decode(msgspec.msgpack.encode({"t": "TokenChunk", "seq": 1, "text": "a"}))


def test_subjects_are_single_tokens():
    for name in ["smollm2-135m", "hf://org/repo", "/models/a.b.gguf", "x y*>", "~", "ü"]:
        token = p.subject_token(name)
        assert token and not set(token) & set(". *>")
    assert p.subject_token("a.b") != p.subject_token("a_b") != p.subject_token("a~2eb")
    assert p.subjects.generate("hf://org/repo").startswith("fak.v1.engine.generate.")
    assert p.subjects.generate("m").count(".") == 4


def test_block_id_is_content_addressed():
    assert p.block_id("same") == p.block_id("same") != p.block_id("other")


def test_enum_like_fields_refuse_other_values_at_decode():
    import typing

    codes = {v for k, v in vars(p.ErrorCode).items() if not k.startswith("_")}
    assert codes == set(typing.get_args(p.ErrorCodeName))
    ok = p.encode(p.ResultVerdict(block="b", verdict="clean"))
    assert p.Decoders.adjudicator_reply.decode(ok).verdict == "clean"
    forged = msgspec.msgpack.encode({"t": "ResultVerdict", "v": 1, "block": "b", "verdict": "Clean"})
    with pytest.raises(msgspec.ValidationError, match="verdict"):
        p.Decoders.adjudicator_reply.decode(forged)
    bad_role = msgspec.msgpack.encode({"t": "GenerateRequest", "v": 1, "request_id": "r", "model": "m",
                                       "messages": [{"role": "robot", "content": "x"}]})
    with pytest.raises(msgspec.ValidationError, match="role"):
        msgspec.msgpack.decode(bad_role, type=p.GenerateRequest)


# -- every message type, found in the module, not listed by hand --------------------------------------------

MESSAGES = sorted((v for v in vars(p).values() if isinstance(v, type) and issubclass(v, p.Message) and v is not p.Message),
                  key=lambda c: c.__name__)


def _decoders() -> dict[type, msgspec.msgpack.Decoder]:
    """Each message type -> the decoder (of `Decoders`) whose union reads it."""
    out = {}
    for d in vars(p.Decoders).values():
        if isinstance(d, msgspec.msgpack.Decoder):
            out.update({t: d for t in typing.get_args(d.type) or (d.type,)})
    return out


def populated(t: mi.Type, name: str, default: object = msgspec.NODEFAULT, depth: int = 0) -> object:
    """A value of type `t` other than `default`, every nested Struct field filled too (each list holds one
    item, down to six levels, so that a recursive Struct such as TokenLogprob ends)."""
    match t:
        case mi.StructType():
            return t.cls(**{f.name: populated(f.type, f.name, f.default, depth + 1) for f in t.fields if f.name != "v"})
        case mi.UnionType():
            return populated(next(u for u in t.types if not isinstance(u, mi.NoneType)), name, default, depth)
        case mi.LiteralType():
            return next(v for v in reversed(t.values) if v != default)
        case mi.BoolType():
            return default is not True
        case mi.IntType():
            return 7 if default != 7 else 8
        case mi.FloatType():
            return 0.25 if default != 0.25 else 0.5
        case mi.StrType():
            return f"{name}-é"
        case mi.BytesType():
            return bytes(range(32))
        case mi.ListType():
            return [populated(t.item_type, name, depth=depth + 1)] if depth < 6 else []
        case mi.DictType():
            return {"k": populated(t.value_type, name, depth=depth + 1)}
        case mi.AnyType():
            return {"nested": [1, "x", None]}
    raise AssertionError(f"no sample value for {name}: {t}")  # a new field type: teach populated()


def test_every_message_type_has_a_decoder():
    assert len(MESSAGES) >= 20
    assert set(MESSAGES) == set(_decoders()), "a message no decoder reads, or a decoder of a non-message"


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda c: c.__name__)
def test_every_message_type_round_trips_with_every_field_set(cls):
    msg = populated(mi.type_info(cls), cls.__name__)
    data = p.encode(msg)
    raw = msgspec.msgpack.decode(data)
    assert raw["t"] == cls.__name__ and raw["v"] == p.SCHEMA_VERSION
    assert set(raw) == {"t"} | {f.encode_name for f in mi.type_info(cls).fields}  # none left out as a default
    assert _decoders()[cls].decode(data) == msg
    assert msgspec.msgpack.decode(data, type=cls) == msg
