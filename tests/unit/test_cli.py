"""The ``specgate`` command line, in process: config check (paths, masked secrets), ``serve
--pool`` naming the pools, ``--version``, help on every flag. The start errors of ``specgate
router`` (a subprocess) are in tests/integration/test_cli_start.py."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from router.app.commands import mask_url
from router.cli import build_parser, main
from tests.support.config_docs import with_


def write(path: Path, doc: dict) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


@pytest.mark.parametrize(("url", "masked"), [
    ("redis://:R-CANARY-9@redis:6379/0", "redis://:****@redis:6379/0"),
    ("rediss://user:R-CANARY-9@redis.example:6380/2", "rediss://user:****@redis.example:6380/2"),
    ("redis://redis:6379/0", "redis://redis:6379/0"),
    ("unix:///run/redis.sock", "unix:///run/redis.sock"),
    (None, None),
])
def test_mask_url(url, masked) -> None:
    assert mask_url(url) == masked


def test_config_check_prints_no_secret(tmp_path, tokenizer_dir, capsys) -> None:
    keys = tmp_path / "engine-key"
    keys.write_text("# the engines' key\nE-CANARY-4\n")
    doc = with_("model.tokenizer", str(tokenizer_dir))
    doc["state"] = {"backend": "redis", "redis_url": "redis://default:R-CANARY-1@redis:6379/0"}
    doc["auth"] = {"api_keys": ["K1-CANARY-2"], "admin_api_key": "A-CANARY-3",
                   "engine_api_key_file": str(keys)}
    assert main(["config", "check", str(write(tmp_path / "c.yaml", doc))]) == 0
    out = capsys.readouterr()
    text = out.out + out.err
    for canary in ("R-CANARY-1", "K1-CANARY-2", "A-CANARY-3", "E-CANARY-4"):
        assert canary not in text
    effective = json.loads(out.out)
    assert effective["state"]["redis_url"] == "redis://default:****@redis:6379/0"
    assert effective["auth"]["api_keys"] == ["**********"]
    assert effective["auth"]["admin_api_key"] == "**********"


@pytest.mark.parametrize(("setup", "needle"), [
    ("no-dir", "model.tokenizer: no such directory: {tmp}/missing"),
    ("empty-dir", ("model.tokenizer: {tmp}/empty holds no tokenizer (needs tokenizer_config.json and "
                  "one of tokenizer.json, tokenizer.model, vocab.json)")),
    ("key-file", "cannot read api_keys_file {tmp}/keys: No such file or directory"),
    ("engine-env", "engine_api_key_env: environment variable SPECGATE_NO_SUCH_ENGINE_KEY is not set"),
])
def test_config_check_verifies_paths_in_one_line(tmp_path, tokenizer_dir, capsys, setup, needle) -> None:
    (tmp_path / "empty").mkdir()
    tok = {"no-dir": tmp_path / "missing", "empty-dir": tmp_path / "empty"}.get(setup, tokenizer_dir)
    doc = with_("model.tokenizer", str(tok))
    if setup == "key-file":
        doc["auth"] = {"api_keys_file": str(tmp_path / "keys")}
    if setup == "engine-env":
        doc["auth"] = {"engine_api_key_env": "SPECGATE_NO_SUCH_ENGINE_KEY"}
    path = write(tmp_path / "c.yaml", doc)
    assert main(["config", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert one_line(err) == "specgate config check: " + needle.format(tmp=tmp_path)
    assert main(["config", "check", "--no-paths", str(path)]) == 0


def test_serve_unknown_pool_names_the_pools(tmp_path, capsys) -> None:
    path = write(tmp_path / "c.yaml", with_("model.tokenizer", "/tmp/tok"))
    assert main(["serve", "--config", str(path), "--pool", "nope", "--print-args"]) == 2
    assert one_line(capsys.readouterr().err) == (
        f"specgate serve: no pool 'nope' in {path}; its pools: spec, plain")


def test_version(capsys) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"specgate {version('specgate')}\n"


def test_every_flag_has_help() -> None:
    missing = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])
            elif not action.help:
                missing.append(" ".join([*path, *(action.option_strings or [action.dest])]))

    walk(build_parser(), ["specgate"])
    assert missing == []


def test_help_texts_carry_no_rst_markup() -> None:
    raw = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        if "``" in parser.format_help():
            raw.append(" ".join(path))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])

    walk(build_parser(), ["specgate"])
    assert raw == []
    assert build_parser().format_help().splitlines()[2].startswith("specgate: an OpenAI-compatible router")


def _engine_doc(tokenizer_dir: Path, model_path: str, draft: str | None = None) -> dict:
    doc = with_("model.tokenizer", str(tokenizer_dir))
    doc["pools"][1]["engine"] = {"model_path": model_path}
    if draft is not None:
        doc["pools"][0]["engine"] = {"model_path": model_path, "speculative_algorithm": "EAGLE3",
                                     "speculative_draft_model_path": draft, "speculative_num_steps": 3,
                                     "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
        del doc["pools"][0]["draft_reserved_tokens"]
    return doc


def test_config_check_verifies_the_engines_model_directories(tmp_path, tokenizer_dir, capsys) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (tmp_path / "not-a-model").mkdir()
    path = write(tmp_path / "c.yaml", _engine_doc(tokenizer_dir, "/nonexistent-model"))
    assert main(["config", "check", str(path)]) == 2
    assert one_line(capsys.readouterr().err) == (
        "specgate config check: pools[plain].engine.model_path: no such directory: /nonexistent-model "
        "(`specgate serve` would start SGLang on it)")
    assert main(["config", "check", "--no-paths", str(path)]) == 0
    capsys.readouterr()
    path = write(tmp_path / "c.yaml", _engine_doc(tokenizer_dir, "not-a-model"))   # relative to the file
    assert main(["config", "check", str(path)]) == 2
    assert one_line(capsys.readouterr().err) == (
        f"specgate config check: pools[plain].engine.model_path: {tmp_path}/not-a-model holds no config.json "
        "(not a model directory)")
    (model / "config.json").write_text("{}")
    path = write(tmp_path / "c.yaml", _engine_doc(tokenizer_dir, "model", draft="./no-draft"))
    assert main(["config", "check", str(path)]) == 2
    assert one_line(capsys.readouterr().err) == (
        "specgate config check: pools[spec].engine.speculative_draft_model_path: no such directory: ./no-draft "
        "(`specgate serve` would start SGLang on it)")
    # a Hugging Face hub id is SGLang's to download; a model directory passes
    path = write(tmp_path / "c.yaml", _engine_doc(tokenizer_dir, "meta-llama/Llama-3.1-8B-Instruct", draft="model"))
    assert main(["config", "check", str(path)]) == 0


def test_serve_refuses_a_missing_model_directory_before_starting_sglang(tmp_path, capsys) -> None:
    doc = _engine_doc(Path("/tmp/tok"), "/nonexistent-model")
    path = write(tmp_path / "c.yaml", doc)
    assert main(["serve", "--config", str(path), "--pool", "plain"]) == 2
    assert one_line(capsys.readouterr().err) == (
        "specgate serve: pools[plain].engine.model_path: no such directory: /nonexistent-model "
        "(`specgate serve` would start SGLang on it)")
    assert main(["serve", "--config", str(path), "--pool", "plain", "--print-args"]) == 0   # argv only
