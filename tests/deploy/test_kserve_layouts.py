"""What KServe hands a serving runtime: the storage URI's content at /mnt/models. ptserve serves
it as a repository of model folders, as one model's folder with version folders, or as one
model's files without a version folder (then version 1)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from ptserve.examples import Scale
from tests.deploy.helpers import infer_scaled, scaled_config, wait_until, write_scaled
from tests.serverproc import ServerProcess


def mnt_models(tmp_path: Path) -> Path:
    folder = tmp_path / "mnt" / "models"
    folder.mkdir(parents=True)
    return folder


def test_a_repository_of_model_folders(tmp_path: Path) -> None:
    models = mnt_models(tmp_path)
    write_scaled(models, "resnet", {1: 2.0})
    with ServerProcess([models]) as server:
        assert infer_scaled(server.http_url, "resnet") == 2.0


@pytest.mark.parametrize(
    ("config_name", "flag", "served_as"),
    [
        ("resnet", None, "resnet"),  # the config's name
        ("", "my-isvc", "my-isvc"),  # --model-name (KServe passes the InferenceService's name)
        ("", None, "models"),  # neither: the folder's name
    ],
)
def test_one_model_with_version_folders(
    tmp_path: Path, config_name: str, flag: str | None, served_as: str
) -> None:
    models = mnt_models(tmp_path)
    (models / "config.pbtxt").write_text(scaled_config(config_name))
    for version, factor in ((1, 1.0), (2, 2.0)):
        (models / str(version)).mkdir()
        torch.jit.save(torch.jit.script(Scale(factor)), str(models / str(version) / "model.pt"))
    args = ["--model-name", flag] if flag else []
    with ServerProcess([models], args) as server:
        assert infer_scaled(server.http_url, served_as) == 2.0
        assert server.status(f"/v2/models/{served_as}/versions/2/ready") == 200
        assert server.status(f"/v2/models/{served_as}/versions/1/ready") != 200  # latest 1


def test_one_model_without_a_version_folder_is_version_1(tmp_path: Path) -> None:
    models = mnt_models(tmp_path)
    (models / "config.pbtxt").write_text(scaled_config())
    torch.jit.save(torch.jit.script(Scale(3.0)), str(models / "model.pt"))
    (models / "labels.txt").write_text("a\nb\nc\nd\n")
    before = sorted(p.name for p in models.iterdir())
    with ServerProcess([models], ["--model-name", "triple"]) as server:
        assert infer_scaled(server.http_url, "triple") == 3.0
        assert server.status("/v2/models/triple/versions/1/ready") == 200
    # /mnt/models is read-only in KServe: nothing is written into it.
    assert sorted(p.name for p in models.iterdir()) == before
    assert "its files are served as version 1" in server.log()


def test_poll_mode_reloads_a_replaced_model_file(tmp_path: Path) -> None:
    models = mnt_models(tmp_path)
    (models / "config.pbtxt").write_text(scaled_config())
    torch.jit.save(torch.jit.script(Scale(1.0)), str(models / "model.pt"))
    args = ["--model-name", "m", "--model-control-mode", "poll", "--repository-poll-secs", "0.5"]
    with ServerProcess([models], args) as server:
        assert infer_scaled(server.http_url, "m") == 1.0
        staged = models.parent / "new.pt"
        torch.jit.save(torch.jit.script(Scale(6.0)), str(staged))
        time.sleep(0.05)  # a new modification time even on coarse clocks
        os.replace(staged, models / "model.pt")
        wait_until(lambda: infer_scaled(server.http_url, "m") == 6.0, what="the reload")


def test_a_name_that_disagrees_with_the_config_is_a_clear_error(tmp_path: Path) -> None:
    models = mnt_models(tmp_path)
    write_scaled(models.parent, "models", {1: 1.0})  # config says name: "models"
    (models / "config.pbtxt").write_text(scaled_config("resnet"))
    server = ServerProcess([models], ["--model-name", "other"]).start(wait=None)
    assert server.wait_exit(60) == 1
    assert "the config names the model 'resnet'" in server.log()


def test_a_bad_model_name_is_refused(tmp_path: Path) -> None:
    server = ServerProcess([mnt_models(tmp_path)], ["--model-name", "../etc"]).start(wait=None)
    assert server.wait_exit(60) == 2
    assert "expected a model name without '/'" in server.log()
