"""The flags of `corpora train` come from the trainer's configuration dataclasses: one flag
per field meant for the command line, with the field's default, and nothing declared by hand
but the few flags that are no setting of a run."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from cli.main import cli
from cli.train import MODEL_SETS, PREFIXLM_ONLY, PREVIEW_DEFAULTS, train
from trainer.config import (
    SMOKE_LM,
    SMOKE_VISION,
    DataConfig,
    OptimConfig,
    PrefixLMConfig,
    TrainConfig,
    VilaConfig,
    option_fields,
    option_of,
    prefixlm_config,
    vila_optim,
)

TRAINING = [(TrainConfig, ()), (OptimConfig, ()), (DataConfig, MODEL_SETS)]
# command → (the dataclasses whose option fields are its flags, but those excluded),
# the flags that are no field, and the defaults it declares in place of the fields'
COMMANDS = {
    "data": ([(DataConfig, ())], {"batches", "mix_samples"}, PREVIEW_DEFAULTS),
    "prefixlm": ([(PrefixLMConfig, ())] + TRAINING, {"smoke"}, {}),
    # PrefixLM's packed streams are no flag of VILA's
    "vila": (
        [(VilaConfig, ()), *TRAINING[:2], (DataConfig, MODEL_SETS + PREFIXLM_ONLY)],
        {"smoke"},
        {},
    ),
}


def _expected_default(field: dataclasses.Field):
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_field_meant_for_the_cli_has_exactly_one_flag_with_its_default(name):
    command = train.commands[name]
    sources, extra, defaults = COMMANDS[name]
    params = {param.name: param for param in command.params if param.name != "help"}
    fields = [(cls, f) for cls, exclude in sources for f in option_fields(cls, exclude)]
    names = [f.name for _, f in fields]
    assert len(names) == len(set(names)), "two dataclasses give the command one field name"
    assert set(params) == set(names) | extra, "a flag declared by hand, or a field without one"
    flags = [opt for param in command.params for opt in param.opts]
    assert len(flags) == len(set(flags)), "a flag declared twice"
    for cls, field in fields:
        option, param = option_of(field), params[field.name]
        assert param.opts == [option.flag], field.name
        assert param.help == option.help, field.name
        assert param.required == option.required, field.name
        if option.required:
            continue
        expected = defaults.get(field.name, _expected_default(field))
        assert param.default == expected, f"{cls.__name__}.{field.name}"
        if option.choices is not None:
            assert list(param.type.choices) == list(option.choices), field.name
        if option.low is not None or option.high is not None:
            assert (param.type.min, param.type.max) == (option.low, option.high), field.name


def test_the_preview_s_own_defaults_are_fields_of_the_data_settings():
    data_fields = {f.name for f in option_fields(DataConfig)}
    assert set(PREVIEW_DEFAULTS) <= data_fields
    assert set(MODEL_SETS) <= data_fields  # the model sets these, the flags do not


@pytest.mark.parametrize("field", ["image_mean", "pin_memory", "prefetch_factor"])
def test_a_field_without_an_option_is_no_flag(field):
    assert field not in {param.name for param in train.commands["data"].params}


class Captured:
    def __call__(self, model_config, config, data):
        self.model_config, self.config, self.data = model_config, config, data


@pytest.fixture
def captured(monkeypatch):
    pytest.importorskip("torch")
    capture = Captured()
    monkeypatch.setattr("trainer.train.run", capture)
    return capture


def _train(*args: str):
    return CliRunner().invoke(cli, ["train", *args], prog_name="corpora")


def test_the_flags_become_the_run_s_settings(captured):
    result = _train(
        "prefixlm", "--data", "out/pairs:8", "--data", "out/c4", "--size", "tiny",
        "--steps", "30", "--lr", "0.003", "--workers", "1", "--weight-unit", "documents",
        "--attn-implementation", "dense", "--batch-size", "4", "--seed", "7",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert captured.model_config == prefixlm_config("tiny", attention="dense")
    assert (captured.config.steps, captured.config.batch_size, captured.config.seed) == (30, 4, 7)
    assert captured.config.optim.lr == 0.003 and captured.config.optim.warmup == 0.02
    assert captured.data.sources == (("out/pairs", 8.0), ("out/c4", 1.0))
    assert (captured.data.num_workers, captured.data.weight_unit) == (1, "documents")
    assert captured.data.batch_size == DataConfig.batch_size  # run() sets the run's


def test_smoke_fills_only_the_flags_not_given(captured):
    result = _train("vila", "--data", "out/mmc4", "--stage", "1", "--smoke", "--steps", "3")
    assert result.exit_code == 0, result.output
    model, config = captured.model_config, captured.config
    assert (model.lm, model.vision, model.stage) == (SMOKE_LM, SMOKE_VISION, 1)
    assert (config.steps, config.batch_size, config.log_every) == (3, 2, 5)
    assert config.optim == vila_optim(1) and captured.data.num_workers == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["prefixlm"], "--steps is required (or --smoke)"),
        (["vila", "--stage", "0", "--steps", "1"], "--lm is required (or --smoke"),
        (["vila", "--stage", "0", "--lm", "x", "--steps", "1"], "--vision is required"),
    ],
)
def test_a_missing_setting_is_named_in_one_line(captured, args, message):
    result = _train(*args[:1], "--data", "out/c4", *args[1:])
    assert result.exit_code == 2 and message in result.output
    assert not hasattr(captured, "config")


def test_a_choice_comes_from_the_dataclass_s_list():
    result = _train("vila", "--data", "x", "--stage", "0", "--projector", "qformer")
    assert result.exit_code == 2
    assert "'qformer' is not one of 'linear', 'mlp2x_gelu'" in result.output
