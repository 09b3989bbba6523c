"""cli/main.py maps flags and nothing else: every flag of `corpora build` is one
the core (or the runner settings) knows, with the core's defaults and choices."""

from __future__ import annotations

import click
import pytest

from cli.main import build, cli
from corpora.config import catalog, flags
from corpora.config.settings import DEFAULTS
from pipelines.runners import RUNNER_FLAGS, runner_settings_from_flags
from tests.helpers import run_cli

COMMAND_ONLY = {"corpus", "beam_args", "overwrite"}  # arguments of the command itself


def parse(*args: str) -> dict:
    """The parameters click hands to ``build`` for ``corpora build ARGS``, defaults included."""
    parent = click.Context(cli, info_name="corpora", **cli.context_settings)  # as `corpora` runs it
    with build.make_context("build", list(args), parent=parent) as context:
        return dict(context.params)


def test_every_build_flag_is_a_flag_the_core_or_the_runner_knows():
    names = {param.name for param in build.params}
    assert names - COMMAND_ONLY - set(RUNNER_FLAGS) == set(flags.flag_names())


@pytest.mark.parametrize("corpus", list(catalog.CORPORA))
def test_the_cli_s_defaults_are_the_core_s(corpus):
    params = parse(corpus, "--input", "x")
    runner_flags = {name: params.pop(name) for name in RUNNER_FLAGS}
    for name in COMMAND_ONLY - {"corpus"}:
        params.pop(name)
    assert params.pop("corpus") == corpus
    assert flags.settings_from_flags(corpus, **params) == flags.settings_from_flags(
        corpus, inputs=("x",)
    )
    assert runner_settings_from_flags(**runner_flags) == runner_settings_from_flags()


def test_corpus_options_are_flags_with_their_spec_s_choices():
    params = {param.name: param for param in build.params}
    for name, option in catalog.options().items():
        param = params[name]
        assert f"--{name.replace('_', '-')}" in param.opts
        if option.choices:
            assert tuple(param.type.choices) == option.choices
        users = ", ".join(catalog.option_users(name))
        assert f"{users}: {option.help}" in param.help
    assert tuple(params["corpus"].type.choices) == tuple(catalog.CORPORA)
    assert params["seq_len"].default == DEFAULTS.seq_len
    assert params["image_size"].default == DEFAULTS.fetch.image_size


def test_a_corpus_option_given_on_the_command_line_reaches_the_settings():
    params = parse("mmc4", "--input", "x", "--max-images", "0", "--reassign", "--min-sim", "0.2")
    for name in (*RUNNER_FLAGS, *COMMAND_ONLY):
        params.pop(name)
    built = flags.settings_from_flags("mmc4", **params)
    assert built.corpus_options["max_images"] is None  # 0: no limit
    assert built.corpus_options["reassign"] is True and built.corpus_options["min_sim"] == 0.2


def test_every_command_has_help():
    for name, command in cli.commands.items():
        assert command.help, name
        if isinstance(command, click.Group):
            assert all(sub.help for sub in command.commands.values())


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--image-token-id", "1", "image token id 1 is the tokenizer's BOS id"),
        ("--image-token-id", "4294967296", "image token id 4294967296 does not fit in int32"),
        ("--pad-id", "-3", "pad id -3 is negative"),
    ],
)
def test_special_ids_are_checked_before_anything_runs(tmp_path, flag, value, message):
    output = tmp_path / "out"
    result = run_cli(
        "build", "c4", "--input", str(tmp_path / "c4.json"), "--output", str(output), flag, value
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"corpora: {message}")
    assert not output.exists()  # refused before the output was touched
