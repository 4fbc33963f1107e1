"""The asynchronous rollout client against the fake SGLang server (named as a fake), on CPU."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pearl_sched.adapters.fake_sglang import FakeConfig, FakeSGLangServer
from pearl_sched.adapters.gateway import Gateway, Registration, find_smg
from pearl_sched.adapters.http import AdapterError, SGLangServerClient
from pearl_sched.adapters.rollout import AsyncRolloutClient, Completion

from .builders import free_ports

pytestmark = pytest.mark.integration


def test_async_client_passes_sampling_parameters_and_returns_logprobs() -> None:
    fake = FakeSGLangServer(FakeConfig(port=free_ports(1)[0])).start()

    async def run() -> None:
        async with AsyncRolloutClient(fake.url, patience_s=10.0, api_key=None) as client:
            done = await client.generate([1, 2, 3], 5, {"temperature": 0.7, "top_p": 0.9}, return_logprob=True)
            assert fake.state.last_sampling_params == {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 5}
            assert len(done.output_ids) == 5
            assert done.output_logprobs == pytest.approx([-0.1 * (i + 1) for i in range(5)])  # the fake's values
            assert (await client.generate([1], 3)).output_logprobs == ()  # not asked for

    try:
        asyncio.run(run())
    finally:
        fake.stop()


def test_async_turns_run_concurrently_and_survive_an_abort() -> None:
    """Eight turns in flight on one event loop; an abort in the middle is resubmitted for the tokens still owed,
    with the logprobs of both parts, and the event loop keeps running meanwhile."""
    # 60 tokens at 50 ms: each turn needs 3 s, so none can finish before all eight have started on a loaded machine
    fake = FakeSGLangServer(FakeConfig(port=free_ports(1)[0], token_time_s=0.05)).start()
    ticks = 0

    async def ticker(stop: asyncio.Event) -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    async def run() -> list[object]:
        stop = asyncio.Event()
        ticking = asyncio.create_task(ticker(stop))
        async with AsyncRolloutClient(fake.url, patience_s=30.0, api_key=None) as client:
            turns = [
                asyncio.create_task(client.generate([seed] * 4, 60, {"temperature": 1.0}, return_logprob=True))
                for seed in range(8)
            ]
            deadline = asyncio.get_running_loop().time() + 20.0
            while not _all_generating(fake, 8):  # every turn has started generating
                if asyncio.get_running_loop().time() > deadline:
                    raise AssertionError(f"eight turns never ran together: {len(fake.state.running)} running")
                await asyncio.sleep(0.02)
            with SGLangServerClient(fake.url, api_key=None) as admin:
                await asyncio.to_thread(admin.pause, "abort")
                await asyncio.to_thread(admin.resume_generation)
            done = await asyncio.gather(*turns)
        stop.set()
        await ticking
        return list(done)

    try:
        done = asyncio.run(run())
    finally:
        fake.stop()
    assert all(len(c.output_ids) == 60 and len(c.output_logprobs) == 60 for c in done)  # type: ignore[attr-defined]
    assert sum(c.resubmits for c in done) >= 8  # type: ignore[attr-defined]  # every turn was cut once
    assert fake.state.requests_total >= 16
    assert ticks > 20  # the loop ran other work while eight turns of ≥ 3 s were in flight


def _all_generating(fake: FakeSGLangServer, n: int) -> bool:
    running = list(fake.state.running.values())
    return len(running) == n and all(r.generated >= 1 for r in running)


def test_async_client_gives_up_after_its_patience() -> None:
    port = free_ports(1)[0]  # nothing listens there

    async def run() -> None:
        async with AsyncRolloutClient(f"http://127.0.0.1:{port}", patience_s=0.3, api_key=None) as client:
            await client.generate([1], 3)

    with pytest.raises(AdapterError, match=r"not served within 0.3 s: last error gateway unreachable"):
        asyncio.run(run())


def test_async_client_through_the_real_smg_gateway(tmp_path: Path) -> None:
    """Turns sent concurrently through smg (round robin over two fake servers) keep their sampling parameters and
    come back with their logprobs."""
    try:
        find_smg()
    except AdapterError as exc:
        pytest.fail(f"the real smg gateway is required for this test: {exc}")
    fakes = [FakeSGLangServer(FakeConfig(port=port)).start() for port in free_ports(2)]
    port, metrics = free_ports(2)
    try:
        with Gateway(port=port, metrics_port=metrics, log_dir=tmp_path, api_key=None) as gateway:
            for fake in fakes:
                gateway.register(fake.url, Registration("regular"))

            async def run() -> list[Completion]:
                async with AsyncRolloutClient(gateway.url, patience_s=30.0, api_key=None) as client:
                    return list(
                        await asyncio.gather(
                            *(
                                client.generate([seed, 2, 3], 8, {"temperature": 0.6, "top_k": 20}, return_logprob=True)
                                for seed in range(6)
                            )
                        )
                    )

            done = asyncio.run(run())
    finally:
        for fake in fakes:
            fake.stop()
    assert all(len(c.output_ids) == 8 and len(c.output_logprobs) == 8 for c in done)
    assert all(f.state.requests_total > 0 for f in fakes)  # both servers behind the gateway served turns
    assert all(f.state.last_sampling_params == {"temperature": 0.6, "top_k": 20, "max_new_tokens": 8} for f in fakes)
