"""The torch reference trainer adapter, on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from pearl_sched.control import TrainerAdapter

torch = pytest.importorskip("torch")  # the torch extra: .ci/run installs torch (CPU) before the package

from pearl_sched.adapters.torch_trainer import TorchTrainer, TrainerBusyError  # noqa: E402 - needs torch


def trainer(tmp_path: Path) -> TorchTrainer:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return TorchTrainer(model, optimizer, gpu_ids=["t0", "t1"], publish_dir=tmp_path, device="cpu")


def step(t: TorchTrainer) -> None:
    with t.training():
        x = torch.randn(32, 8)
        loss = t.model(x).pow(2).mean()
        t.optimizer.zero_grad()
        loss.backward()
        t.optimizer.step()


def test_lend_and_reclaim_keep_model_and_optimizer_state(tmp_path: Path) -> None:
    t = trainer(tmp_path)
    assert isinstance(t, TrainerAdapter)
    step(t)
    before = t.state_fingerprint()
    assert any(k.startswith("o:") for k in before)  # AdamW has moments to carry
    t.lend(["t0", "t1"])
    with pytest.raises(TrainerBusyError, match="lent to rollout"):
        step(t)
    t.reclaim(["t0"], deadline_s=5.0)
    with pytest.raises(TrainerBusyError):  # one GPU is still out
        step(t)
    t.reclaim(["t1"], deadline_s=5.0)
    assert t.state_fingerprint() == before
    step(t)
    assert t.weight_version() == 2
    with pytest.raises(ValueError, match="does not own"):
        t.lend(["x9"])


def test_published_weights_load_back_with_their_version(tmp_path: Path) -> None:
    from safetensors import safe_open

    t = trainer(tmp_path)
    step(t)
    path = Path(t.publish_weights())
    assert path.name == "v1"
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        assert f.metadata()["weight_version"] == "1"
        for name, tensor in t.model.state_dict().items():
            assert torch.equal(f.get_tensor(name), tensor)
