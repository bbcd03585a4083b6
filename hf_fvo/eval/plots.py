"""Figures for audits (matplotlib, the ``plot`` extra: ``pip install "hf-fvo[plot]"``)."""

from __future__ import annotations

from pathlib import Path

from hf_fvo.eval.audit import AuditReport

__all__ = ["plot_audit"]


def plot_audit(report: AuditReport, path: str | Path, *, max_branches: int = 12) -> Path:
    """Write the audit as a PNG: per text, μ_proj vs μ* vs FVO frequency (exact audits), or the
    per-step survival spread log Γ̂ (sampled audits).

    Raises:
        ImportError: matplotlib is not installed (``pip install "hf-fvo[plot]"``).

    Example:
        >>> import tempfile, pathlib
        >>> from hf_fvo.eval import AuditReport, Branch, plot_audit
        >>> report = AuditReport("choices", True, 0.2, 0.3, 0.0,
        ...                      [Branch("yes", 0.7, 0.5, 0.52), Branch("no", 0.3, 0.5, 0.48)])
        >>> out = plot_audit(report, pathlib.Path(tempfile.mkdtemp()) / "audit.png")
        >>> out.stat().st_size > 1000
        True
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError('plotting needs matplotlib: pip install "hf-fvo[plot]"') from exc
    import numpy as np

    path = Path(path)
    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=120)
    if report.exact:
        shown = report.branches[:max_branches]
        x = np.arange(len(shown))
        series = [("μ_proj (local masking)", [b.proj for b in shown], "#d95f02"),
                  ("μ* (intended)", [b.star for b in shown], "#1b9e77")]  # fmt: skip
        if shown and shown[0].fvo is not None:
            series.append((f"FVO samples (exact Φ, N={report.samples})",
                           [b.fvo for b in shown], "#7570b3"))  # fmt: skip
        width = 0.8 / len(series)
        for i, (label, values, color) in enumerate(series):
            ax.bar(x + (i - (len(series) - 1) / 2) * width, values, width, label=label,
                   color=color)  # fmt: skip
        ax.set_xticks(x, [_short(b.text) for b in shown], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("probability of the text")
        ax.set_title(f"Local masking vs the intended law — TV(μ_proj, μ*) = {report.tv:.3f}\n"
                     f"{_short(report.grammar, 90)}", fontsize=10)  # fmt: skip
        ax.legend(fontsize=8)
    else:
        ax.hist(report.log_gamma, bins=30, color="#7570b3")
        ax.set_xlabel(f"per-step survival spread log Γ̂ (Φ̂ = {report.phi}); KL(μ*‖μ_proj) ≤ log Γ")
        ax.set_ylabel("positions")
        ax.set_title(f"Sampled audit — TV(masked, Φ̂ draws) = {report.tv:.3f} "
                     f"(null p95 {report.null_p95:.3f})\n{_short(report.grammar, 90)}",
                     fontsize=10)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _short(text: str, limit: int = 28) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
