"""Reproductions of the seed papers' headline experiments (``make reproduce``; docs/experiments.md)."""

from lightning_fl.reproduce.claims import Claim, Verdict, judge, judge_all
from lightning_fl.reproduce.paper import Metric, Paper, SettingResults
from lightning_fl.reproduce.settings import Setting

__all__ = ["Claim", "Metric", "Paper", "Setting", "SettingResults", "Verdict", "judge", "judge_all"]
