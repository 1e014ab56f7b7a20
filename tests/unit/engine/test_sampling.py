"""Sampling is numerically safe for every value the wires accept, and refuses what no sampler can honour."""

from __future__ import annotations

import numpy as np
import pytest

from fakcore.engine.prompt import RequestError
from fakcore.engine.sampling import Sampler, validate_sampling, with_defaults
from fakcore.models.sources import recommended_sampling
from fakcore.protocol import Sampling
from fakcore.settings import Settings, SettingsError, sampling_defaults

LOGITS = np.array([0.5, 3.0, 2.9, -1.0, 1e4, -1e4], np.float32)


@pytest.mark.parametrize("temperature", [1e-308, 5e-324, 1e-30, 1e-6])
def test_a_vanishing_temperature_is_greedy_not_nan(temperature):
    s = Sampler(Sampling(temperature=temperature, seed=3))
    assert [s(LOGITS) for _ in range(20)] == [4] * 20


@pytest.mark.parametrize("top_p,top_k", [(1.0, 0), (0.9, 0), (0.0, 0), (1.0, 3)])
def test_tiny_temperature_with_nucleus_and_top_k(top_p, top_k):
    s = Sampler(Sampling(temperature=1e-300, top_p=top_p, top_k=top_k, seed=1))
    assert s(LOGITS) == 4


def test_a_huge_temperature_flattens_towards_uniform():
    s = Sampler(Sampling(temperature=100.0, seed=7))
    draws = [s(np.zeros(8, np.float32)) for _ in range(400)]
    assert set(draws) == set(range(8))


@pytest.mark.parametrize("seed", [-1, -(2**63), 2**64 + 5, 0])
def test_any_integer_seed_is_reproducible(seed):
    logits = np.linspace(0, 1, 50).astype(np.float32)
    a = Sampler(Sampling(temperature=1.0, seed=seed))
    b = Sampler(Sampling(temperature=1.0, seed=seed))
    assert [a(logits) for _ in range(10)] == [b(logits) for _ in range(10)]


def test_negative_seeds_map_to_their_64_bit_twos_complement():
    logits = np.linspace(0, 1, 50).astype(np.float32)
    a, b = Sampler(Sampling(temperature=1.0, seed=-1)), Sampler(Sampling(temperature=1.0, seed=2**64 - 1))
    assert [a(logits) for _ in range(10)] == [b(logits) for _ in range(10)]


@pytest.mark.parametrize("sampling", [Sampling(temperature=0.0), Sampling(temperature=0.7, seed=1), Sampling(top_k=1)])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("at", [0, 3, 999])
def test_non_finite_logits_fail_the_sequence(sampling, bad, at):
    """A NaN or +inf anywhere in the row fails it, wherever it sits and whatever else the row holds
    (an allowed-token mask that excludes it included); -inf is a logit like any other."""
    for dtype in (np.float32, np.float64):
        logits = np.linspace(-3, 3, 1000).astype(dtype)
        logits[5] = 1e30 if dtype == np.float64 else 3e38  # a larger finite logit elsewhere
        logits[at] = bad
        with pytest.raises(FloatingPointError, match="non-finite"):
            Sampler(sampling)(logits)
        with pytest.raises(FloatingPointError, match="non-finite"):
            Sampler(sampling)(logits, allowed=np.arange(1000) == 7)
    fine = np.linspace(-3, 3, 1000).astype(np.float32)
    fine[10] = -np.inf
    assert Sampler(Sampling(temperature=0.0))(fine) == 999


def test_greedy_takes_the_first_of_equal_best_logits_and_respects_the_mask():
    logits = np.array([0.5, 2.0, -1.0, 2.0, 2.0], np.float32)
    greedy = Sampler(Sampling(temperature=0.0))
    assert greedy(logits) == 1
    assert greedy(logits, allowed=np.array([True, False, True, True, True])) == 3
    assert greedy(logits, allowed=np.array([True, False, True, False, False])) == 0


@pytest.mark.parametrize("params,field", [
    (Sampling(temperature=float("nan")), "temperature"), (Sampling(temperature=-0.1), "temperature"),
    (Sampling(temperature=float("inf")), "temperature"), (Sampling(temperature=1e9), "temperature"),
    (Sampling(top_p=1.5), "top_p"), (Sampling(top_p=float("nan")), "top_p"), (Sampling(top_k=-2), "top_k"),
    (Sampling(max_tokens=0), "max_tokens"),
])
def test_out_of_range_parameters_are_refused(params, field):
    with pytest.raises(RequestError, match=f"`{field}`"):
        validate_sampling(params)


def test_every_edge_value_the_wires_accept_passes_validation():
    for p in [Sampling(temperature=0.0), Sampling(temperature=2.0), Sampling(temperature=1e-308), Sampling(top_p=0.0),
              Sampling(top_p=1.0), Sampling(top_k=0), Sampling(max_tokens=1), Sampling(seed=-1)]:
        validate_sampling(p)


def test_unset_knobs_take_the_models_defaults_and_set_ones_win():
    assert with_defaults(Sampling(), {"temperature": 0.2, "top_p": 0.9}) == Sampling(temperature=0.2, top_p=0.9, top_k=0)
    assert with_defaults(Sampling(temperature=0.7, top_k=5), {"temperature": 0.2}) == Sampling(temperature=0.7, top_p=1.0, top_k=5)
    assert Sampler(Sampling()).temperature == 1.0  # unset everywhere: neutral


def test_the_catalogue_recommends_its_models_sampling():
    assert recommended_sampling("smollm2-135m") == {"temperature": 0.2, "top_p": 0.9}
    assert recommended_sampling("/cache/models/gemma3-270m/gemma-3-270m-q4_k_m.gguf")["top_k"] == 64
    assert recommended_sampling("synthetic") == {}


@pytest.mark.parametrize("text,error", [("temprature=0", "did you mean temperature"), ("top_p=2", "outside"),
                                        ("top_k=1.5", "not an integer"), ("temperature", "knob=value")])
def test_a_misspelt_sampling_setting_is_refused(text, error):
    with pytest.raises(SettingsError, match=error):
        Settings.load(env={}, sampling=text)
    assert sampling_defaults("temperature=0, top_k=40") == {"temperature": 0.0, "top_k": 40}
