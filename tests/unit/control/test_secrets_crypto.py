"""The secrets seal (control/secrets.py): AES-GCM bound to (scope, holder, name), key files, masking."""

from __future__ import annotations

import os
import pathlib

import pytest

from common import errors
from common.config import ConfigError
from control import secrets as sec


def _keyring(seed: int = 1) -> sec.Keyring:
    return sec.Keyring(sec.SecretKey(bytes([seed]) * sec.KEY_BYTES))


def test_a_sealed_value_opens_with_its_key_and_row() -> None:
    ring = _keyring()
    key_id, blob = ring.seal("user", "alice", "WANDB", "s3cr3t-value")
    assert b"s3cr3t-value" not in blob
    assert ring.open("user", "alice", "WANDB", key_id, blob) == "s3cr3t-value"


def test_two_seals_of_one_value_differ() -> None:
    ring = _keyring()
    assert ring.seal("user", "alice", "A", "v")[1] != ring.seal("user", "alice", "A", "v")[1]


def test_wrong_key_is_refused() -> None:
    key_id, blob = _keyring(1).seal("user", "alice", "A", "value")
    other = _keyring(2)
    with pytest.raises(sec.SecretUnreadable, match="sealed with a key this console does not have"):
        other.open("user", "alice", "A", key_id, blob)
    # even when the row claims the other key's id, the tag does not verify
    with pytest.raises(sec.SecretUnreadable, match="does not decrypt"):
        other.open("user", "alice", "A", other.current.key_id, blob)  # type: ignore[union-attr]


@pytest.mark.parametrize("position", [0, 5, sec.NONCE_BYTES, sec.NONCE_BYTES + 2, -1])
def test_tampered_ciphertext_is_refused(position: int) -> None:
    ring = _keyring()
    key_id, blob = ring.seal("user", "alice", "A", "value")
    broken = bytearray(blob)
    broken[position] ^= 0x01
    with pytest.raises(sec.SecretUnreadable):
        ring.open("user", "alice", "A", key_id, bytes(broken))
    with pytest.raises(sec.SecretUnreadable):
        ring.open("user", "alice", "A", key_id, blob[:-1])


@pytest.mark.parametrize(
    "row",
    [("user", "bob", "A"), ("user", "alice", "B"), ("project", "alice", "A"), ("project", "@alice/lab", "A")],
)
def test_a_ciphertext_moved_to_another_row_is_refused(row: tuple[str, str, str]) -> None:
    """Associated data binds the value to its (scope, holder, name): a database writer cannot
    copy alice's sealed value into bob's row and have bob's job decrypt it."""
    ring = _keyring()
    key_id, blob = ring.seal("user", "alice", "A", "value")
    with pytest.raises(sec.SecretUnreadable, match="does not decrypt"):
        ring.open(*row, key_id, blob)


def test_a_console_without_key_keeps_no_secrets() -> None:
    with pytest.raises(errors.FailedPrecondition, match="no secrets_key_file"):
        sec.Keyring(None).seal("user", "alice", "A", "value")


def test_old_keys_open_but_the_current_key_seals() -> None:
    old, new = sec.SecretKey(b"\x01" * 32), sec.SecretKey(b"\x02" * 32)
    key_id, blob = sec.Keyring(old).seal("user", "alice", "A", "value")
    ring = sec.Keyring(new, (old,))
    assert ring.open("user", "alice", "A", key_id, blob) == "value"
    assert ring.seal("user", "alice", "A", "value")[0] == new.key_id != old.key_id


def test_key_file_is_created_once_with_mode_0600(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "state" / "secrets.key"
    assert sec.create_key_file(path)
    first = path.read_bytes()
    assert len(first) == 32 and oct(path.stat().st_mode & 0o777) == "0o600"
    assert not sec.create_key_file(path)
    assert path.read_bytes() == first
    assert sec.load_key_file(path).key == first


def test_bad_key_files_are_refused_with_the_fix(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "missing.key"
    with pytest.raises(ConfigError, match="head -c 32 /dev/urandom"):
        sec.load_key_file(missing)
    short = tmp_path / "short.key"
    short.write_bytes(b"x" * 16)
    short.chmod(0o600)
    with pytest.raises(ConfigError, match="exactly 32 bytes"):
        sec.load_key_file(short)
    open_ = tmp_path / "open.key"
    open_.write_bytes(os.urandom(32))
    open_.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        sec.load_key_file(open_)


def test_masker_replaces_every_value_and_its_lines_and_base64() -> None:
    mask = sec.Masker(["hunter2-long", "line-one\nline-two", "ab"])
    assert mask("token=hunter2-long and hunter2-long") == "token=*** and ***"
    assert mask("got line-two") == "got ***"
    assert mask("b64 aHVudGVyMi1sb25n") == "b64 ***"
    assert mask("ab stays: too short to mask") == "ab stays: too short to mask"
    assert not sec.Masker([]).active and sec.Masker([])("x") == "x"


def test_masker_prefers_the_longest_value() -> None:
    assert sec.Masker(["abcd", "abcdefgh"])("abcdefgh") == "***"
