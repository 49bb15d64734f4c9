"""Batching settings the reference refuses at load are refused here too, with the reason."""

from __future__ import annotations

import time
from pathlib import Path

from ptserve.examples import write_model
from tests.scheduling import models
from tests.scheduling.helpers import write_probe
from tests.serverproc import ServerProcess

BAD = {
    "preferred_too_big": (
        "dynamic_batching { preferred_batch_size: [ 16 ] }",
        "preferred_batch_size 16",
    ),
    "default_level_out_of_range": (
        "dynamic_batching { priority_levels: 2 default_priority_level: 3 }",
        "default priority level must be in range [1, 2] for default_level_out_of_range",
    ),
    "policy_level_out_of_range": (
        "dynamic_batching { priority_levels: 2 default_priority_level: 1 "
        "priority_queue_policy { key: 5 value { max_queue_size: 1 } } }",
        "priority queue policy must have priority level in range [1, 2] for "
        "policy_level_out_of_range: dynamic_batching.priority_queue_policy has priority level 5",
    ),
    "three_flag_values": (
        'sequence_batching { control_input [ { name: "START" control [ { kind: '
        "CONTROL_SEQUENCE_START int32_false_true: [ 0, 1, 2 ] } ] } ] }",
        "sequence batching control 'int32_false_true' must have exactly 2 entries for "
        "CONTROL_SEQUENCE_START for three_flag_values",
    ),
    "float_corrid": (
        'sequence_batching { control_input [ { name: "C" control [ { kind: '
        "CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] } ] }",
        "unexpected data type for control CONTROL_SEQUENCE_CORRID for float_corrid",
    ),
}


def test_invalid_batching_configs_fail_to_load(tmp_path: Path) -> None:
    for name, (settings, _) in BAD.items():
        write_probe(tmp_path, name, settings)
    write_probe(tmp_path, "fine", "dynamic_batching { preferred_batch_size: [ 2, 4 ] }")
    with ServerProcess([tmp_path], ["--exit-on-error=false"]).start(wait="live") as server:
        server.wait_for("live", 60)
        for _ in range(300):
            if server.status("/v2/models/fine/ready") == 200:
                break
            time.sleep(0.1)
        assert server.status("/v2/models/fine/ready") == 200, server.log()
        log = server.log()
        for name, (_, message) in BAD.items():
            assert server.status(f"/v2/models/{name}/ready") != 200, name
            assert f"failed to load '{name}'" in log and message in log, (name, message)


def test_sequence_model_counts_its_control_inputs(tmp_path: Path) -> None:
    """The model must take the control and state inputs the config declares."""
    config = """
        name: "short"
        platform: "pytorch_libtorch"
        max_batch_size: 4
        input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
        sequence_batching {
          control_input [
            { name: "START"
              control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }
          ]
        }
    """
    write_model(tmp_path, "short", config, {1: models.script(models.ShapeProbe())})
    server = ServerProcess([tmp_path]).start(wait=None)
    assert server.wait_exit(120) != 0
    log = server.log()
    assert "configuration expects 2 inputs" in log, log
