"""Traces to start from: the PR's reconstruction (:mod:`~warmfit.samples.synthetic`),
real GPU measurements converted to traces (:mod:`~warmfit.samples.art_h200`,
:mod:`~warmfit.samples.liger_gpu`), and the demo that records a real run
(:mod:`~warmfit.samples.demo`).
"""
