"""One rank of a multi-process run, started by the tests under ``torch.distributed.run``.

    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        -m tests.trainer.ddp_worker SPEC.json

SPEC.json names the model (``prefixlm``, or ``vila`` with its files), the build,
the strategy, the steps and where to write: each rank writes ``rank{R}.pt``
with its losses and its model's weights (whole, gathered under FSDP). With
``output`` it checkpoints there (and resumes from there); with ``crash_after``
its data stream fails after that many batches; with ``global_rows`` (a count) every rank
reads its rows of the same global batches (``contract.GlobalRows``, ``global_batch`` rows
each), which a run resumes from at another world size.
"""

from __future__ import annotations

import json
import os
import sys

import torch


def main(path: str) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from tests.trainer.contract import Crashing, GlobalRows
    from trainer.config import prefixlm_config, prefixlm_optim, train_config, vila_config
    from trainer.loader import data_config
    from trainer.runtime import start
    from trainer.train import data_loaders, run

    with open(path) as handle:
        spec = json.load(handle)
    if spec["model"] == "prefixlm":
        model_config = prefixlm_config("tiny")
    else:
        model_config = vila_config(spec["lm"], spec["vision"], spec["vision_checkpoint"], stage=1)
    config = train_config(
        steps=spec["steps"],
        batch_size=spec.get("batch_size", 2),
        optim=prefixlm_optim(lr=3e-3),
        strategy=spec["strategy"],
        log_every=1,
        output=spec.get("output"),
        checkpoint_every=spec.get("checkpoint_every", 1000),
        resume=bool(spec.get("output")),
    )

    loaders = data_loaders(data_config([spec["build"]], num_workers=0, shuffle_buffer=8))

    def make_loader(**options):
        if "global_rows" in spec:
            whole = {**options, "batch_size": spec["global_batch"], "rank": 0, "world_size": 1}
            loader = GlobalRows(
                loaders(**whole), options["rank"], options["world_size"], spec["global_rows"]
            )
        else:
            loader = loaders(**options)
        return Crashing(loader, spec["crash_after"]) if "crash_after" in spec else loader

    runtime = start("cpu")
    try:
        result = run(model_config, config, make_loader, runtime=runtime)
        weights = get_model_state_dict(
            result.model, options=StateDictOptions(full_state_dict=True, cpu_offload=False)
        )
        torch.save(
            {
                "losses": result.losses,
                "image_token_id": result.model.image_token_id,
                "strategy": runtime.strategy,
                "weights": {name: value.detach().cpu() for name, value in weights.items()},
            },
            os.path.join(spec["out"], f"rank{runtime.rank}.pt"),
        )
    finally:
        runtime.close()


if __name__ == "__main__":
    main(sys.argv[1])
