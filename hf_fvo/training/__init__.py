"""Learned Φ: labels (exact Φ under Markov LMs and on finite languages, Monte-Carlo and path
labels on open grammars), the corpus behind the shipped weights, training, and the
``hf-fvo train-phi`` pipeline. It samples with :mod:`hf_fvo.generation`, so it sits above it;
the estimator that uses the weights is :class:`hf_fvo.phi.LearnedPhi`."""

from hf_fvo.training.fit import path_brier, step_tv, train_phi_model
from hf_fvo.training.labels import (
    labels_dataset,
    markov_labels,
    path_labels,
    rollout_labels,
    trie_labels,
)
from hf_fvo.training.pipeline import TrainingRun, train_phi

__all__ = [
    "TrainingRun",
    "labels_dataset",
    "markov_labels",
    "path_brier",
    "path_labels",
    "rollout_labels",
    "step_tv",
    "train_phi",
    "train_phi_model",
    "trie_labels",
]
