"""The real SmolLM2-135M-Instruct through the whole running system on the defaults (numba, activations `auto`:
int8 where the CPU runs an int8 path), on a bus of its own: no other module's smollm2-135m worker (f32) may be
listed beside this one's or answer for it."""

from __future__ import annotations

import json
import subprocess
import sys

import openai
import pytest

from fakcore.launcher import Topology
from tests.conftest import base_settings, running

pytestmark = pytest.mark.slow


QUESTIONS = ["What is the capital of France?", "What is the capital of Italy?", "What is 2 + 2?"]
# The same path in a fresh process: greedy, 16 tokens, the chat template; prints [device, answers]
IN_PROCESS = """
import json, sys
import fak_engine_cpu.backend
from fakcore.engine.loader import load_model, make_backend
from fakcore.engine.scheduler import Scheduler
from fakcore.engine.sequence import Sequence
from fakcore.protocol import GenerateRequest, Sampling
model = load_model("smollm2-135m", make_backend("numba", threads=2, activations="auto"))
answers = []
for q in json.loads(sys.argv[1]):
    text = model.template.render([{"role": "user", "content": q}], add_generation_prompt=True)
    seq = Sequence(request=GenerateRequest(request_id=q, model=model.name, prompt=text,
                                           sampling=Sampling(max_tokens=16, temperature=0.0)),
                   prompt=model.tokenizer.encode(text), cache=model.transformer.new_cache(), model=model)
    sched = Scheduler(model, lambda *a: None, max_sessions=1, max_queue=1)
    sched.submit(seq)
    while sched.active or sched.waiting:
        sched.step()
    answers.append(model.tokenizer.decode([t for t in seq.generated if t not in model.config.eos_ids]))
print(json.dumps([model.transformer.be.device, answers]))
"""


def test_the_default_path_serves_what_it_computes(tmp_path):
    """A worker on the defaults (numba, activations auto) answers three chat prompts with exactly the greedy
    continuation the same path gives in a fresh process of its own, and names its path in the heartbeat."""
    from fakcore.settings import Settings

    assert Settings.load(env={}).activations == "auto"
    # its own bus (an embedded nats-server in a temporary dir): on the shared one, a smollm2-135m worker another
    # module left announced could be listed and routed to
    settings = base_settings("", data_dir="temp", model="smollm2-135m", backend="numba", threads=2, adjudicate=False)
    assert settings.activations == "auto"
    out = subprocess.run([sys.executable, "-c", IN_PROCESS, json.dumps(QUESTIONS)], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    device, expected = json.loads(out.strip().splitlines()[-1])
    with running(Topology(settings, services=("engine-cpu", "gateway"), log_dir=tmp_path), timeout=240) as topo:
        [worker] = topo.health()["workers"]
        assert worker["device"] == device, worker
        client = openai.OpenAI(base_url=topo.gateway_url + "/v1", api_key="-", max_retries=0, timeout=300)
        served = [client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": q}],
                                                 max_tokens=16, temperature=0).choices[0].message.content
                  for q in QUESTIONS]
    assert served == expected
