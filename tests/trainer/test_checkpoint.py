"""Checkpoints: everything a run needs to continue, local or behind a URL."""

import json
import os

import fsspec
import pytest
import torch
from torch import nn

from trainer import checkpoint
from trainer.config import ConfigError, prefixlm_optim
from trainer.runtime import start
from trainer.train import make_optimizer, schedule


class Position:
    """A data stream's position, as the loader keeps it."""

    def __init__(self, batches=0):
        self.batches = batches

    def state_dict(self):
        return {"batches": self.batches, "note": ("any", "structure")}

    def load_state_dict(self, state):
        self.batches = state["batches"]


def parts(seed=0, frozen=False):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 2))
    if frozen:
        model[0].requires_grad_(False)
    optimizer = make_optimizer(model, prefixlm_optim())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule(prefixlm_optim(), 100))
    return model, optimizer, scheduler


def train_a_little(model, optimizer, scheduler, steps=3):
    for _ in range(steps):
        model(torch.randn(5, 4)).pow(2).sum().backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def save(output, step, model, optimizer, scheduler, loader, keep=3):
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    return checkpoint.save(
        output,
        step,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        loader=loader,
        runtime=start("cpu"),
        trainable=trainable,
        settings={"run": "test"},
        keep=keep,
    )


@pytest.mark.parametrize("where", ["local", "memory"])
def test_a_checkpoint_restores_weights_optimizer_schedule_data_and_rng(tmp_path, where):
    output = str(tmp_path / "run") if where == "local" else f"memory://ckpt-{os.getpid()}/run"
    model, optimizer, scheduler = parts()
    train_a_little(model, optimizer, scheduler)
    saved = save(output, 3, model, optimizer, scheduler, Position(7))
    assert checkpoint.latest(output) == saved and saved.endswith("step-00000003")
    expected_next = torch.rand(3)  # the random numbers a resumed run must draw next
    fresh, fresh_optimizer, fresh_scheduler = parts(seed=1)
    loader = Position()
    step = checkpoint.load(
        saved,
        model=fresh,
        optimizer=fresh_optimizer,
        scheduler=fresh_scheduler,
        loader=loader,
        runtime=start("cpu"),
    )
    assert step == 3 and loader.batches == 7
    assert torch.equal(torch.rand(3), expected_next)
    for (name, a), (_, b) in zip(model.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(a, b), name
    assert fresh_scheduler.get_last_lr() == scheduler.get_last_lr()
    # the next steps are the same steps
    torch.manual_seed(5)
    train_a_little(model, optimizer, scheduler, 2)
    torch.manual_seed(5)
    train_a_little(fresh, fresh_optimizer, fresh_scheduler, 2)
    for (name, a), (_, b) in zip(model.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(a, b), name
    if where == "memory":
        fsspec.filesystem("memory").rm(output, recursive=True)


def test_only_the_trained_weights_are_saved(tmp_path):
    model, optimizer, scheduler = parts(frozen=True)
    saved = save(str(tmp_path), 1, model, optimizer, scheduler, Position())
    weights = torch.load(os.path.join(saved, "model.pt"))
    assert sorted(weights) == ["1.bias", "1.weight", "2.bias", "2.weight"]
    state = json.loads(open(os.path.join(saved, "state.json")).read())
    assert state["step"] == 1 and state["world_size"] == 1 and state["settings"] == {"run": "test"}


def test_latest_moves_only_when_a_checkpoint_is_complete_and_old_ones_go(tmp_path):
    output = str(tmp_path)
    model, optimizer, scheduler = parts()
    for step in (1, 2, 3, 4):
        save(output, step, model, optimizer, scheduler, Position(step), keep=2)
    root = os.path.join(output, "checkpoints")
    assert sorted(os.listdir(root)) == ["latest", "step-00000003", "step-00000004"]
    # a run killed while writing step 5 leaves its folder but not the marker
    os.makedirs(os.path.join(root, "step-00000005"))
    assert checkpoint.latest(output).endswith("step-00000004")
    assert checkpoint.latest(str(tmp_path / "elsewhere")) is None


def test_a_run_of_another_world_size_is_refused_in_one_line(tmp_path):
    model, optimizer, scheduler = parts()
    saved = save(str(tmp_path), 1, model, optimizer, scheduler, Position())
    path = os.path.join(saved, "state.json")
    state = json.loads(open(path).read())
    state["world_size"] = 4
    open(path, "w").write(json.dumps(state))
    with pytest.raises(ConfigError, match="saved by 4 processes, this run has 1"):
        checkpoint.load(
            saved,
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            loader=Position(),
            runtime=start("cpu"),
        )


def test_init_takes_the_trained_weights_of_another_run(tmp_path):
    model, optimizer, scheduler = parts(frozen=True)
    train_a_little(model, optimizer, scheduler)
    save(str(tmp_path), 2, model, optimizer, scheduler, Position())
    fresh, _, _ = parts(seed=3, frozen=True)
    assert checkpoint.init_weights(fresh, str(tmp_path)) == 4
    assert torch.equal(fresh[2].weight, model[2].weight)
    assert not torch.equal(fresh[0].weight, model[0].weight)  # frozen: not in the checkpoint
    other = nn.Sequential(nn.Linear(4, 2))
    with pytest.raises(ConfigError, match="holds weights this model does not have: 1.bias"):
        checkpoint.init_weights(other, str(tmp_path))
    with pytest.raises(ConfigError, match="no checkpoint at"):
        checkpoint.init_weights(fresh, str(tmp_path / "nothing"))
