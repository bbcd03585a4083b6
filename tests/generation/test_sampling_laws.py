"""generate(do_sample=True) samples the law its estimator promises: exact → μ*, uniform → μ_proj.

Thresholds come from the null distribution: the 95th percentile of TV between N draws from the
exact law and the law itself. A power check shows each test could fail: the samples are far
from the other law (beyond that law's 99th null percentile).
"""

from __future__ import annotations

import pytest
import torch

import hf_fvo
from hf_fvo.eval import empirical_tv, null_tv_percentiles
from tests.generation.finite import MAX_NEW, PROMPT, N, finite_setting

BATCH = 1000


@pytest.fixture(scope="module")
def setting(sp_tokenizer):
    return finite_setting(sp_tokenizer)


def _sample(model, grammar, phi, seed):
    torch.manual_seed(seed)
    ids = torch.tensor([PROMPT] * BATCH)
    samples = []
    for _ in range(N // BATCH):
        out = hf_fvo.generate(
            model, ids, grammar=grammar, phi=phi, max_new_tokens=MAX_NEW,
            do_sample=True, top_k=0, top_p=1.0, temperature=1.0,
        )  # fmt: skip
        for row in out[:, len(PROMPT) :].tolist():
            end = row.index(grammar.eos_token_id)  # the budget guarantees EOS
            samples.append(tuple(row[: end + 1]))
    return samples


def test_the_two_laws_differ_in_this_setting(setting):
    _, _, star, proj = setting
    assert star.residual == proj.residual == 0.0
    assert star.tv(proj) > 0.1


@pytest.mark.parametrize(("phi", "target", "other"), [("exact", 2, 3), ("uniform", 3, 2)])
def test_sampling_matches_its_exact_law(setting, phi, target, other):
    laws = {2: setting[2], 3: setting[3]}
    model, grammar = setting[0], setting[1]
    samples = _sample(model, grammar, phi, seed=0)
    p95, _ = null_tv_percentiles(laws[target], N, seed=1)
    _, p99_other = null_tv_percentiles(laws[other], N, seed=2)
    assert empirical_tv(samples, laws[target]) <= p95
    assert empirical_tv(samples, laws[other]) > p99_other  # the test has power
