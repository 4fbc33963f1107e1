"""The SGLang release table: version parsing, which flags each release gets, and argv checks by a parser."""

from __future__ import annotations

import dataclasses

import pytest

from pearl_sched.adapters.fake_sglang import FAKE_VERSIONS, launch_parser, parse_args
from pearl_sched.adapters.http import version_tuple
from pearl_sched.adapters.launcher import FAKE, SGLANG, ServerSpec, server_argv
from pearl_sched.adapters.sglang_versions import (
    ENABLE_PD_ROLE_SWITCH,
    RELEASES,
    SGLangCompatibilityError,
    check_argv,
    gated_flags,
    installed_version,
    release_for,
    sglang_parser,
)


def spec(role: str, version: str) -> ServerSpec:
    return ServerSpec("w00", role, "m", 30000, (0,), bootstrap_port=30001, sglang_version=version)


def test_versions_are_pep_440() -> None:
    assert version_tuple("0.5.2rc1") == (0, 5, 2)  # not (0, 5, 21)
    assert version_tuple("0.5.21.post1") == (0, 5, 21)
    assert release_for("0.5.10.post1").version == "0.5.10"
    assert release_for("0.5.9").version == "0.5.8"
    assert release_for("0.5.21rc1").version == "0.5.10"  # a pre-release may lack what the release has
    assert release_for("0.6.0").version == RELEASES[-1].version
    with pytest.raises(SGLangCompatibilityError, match="older than the oldest"):
        release_for("0.4.10")
    with pytest.raises(SGLangCompatibilityError, match="not a PEP 440 version"):
        release_for("latest")


@pytest.mark.parametrize("version", FAKE_VERSIONS)
@pytest.mark.parametrize("role", ["regular", "prefill", "decode"])
def test_launch_argv_has_only_the_release_s_flags(version: str, role: str) -> None:
    argv = server_argv(spec(role, version), FAKE)
    release = release_for(version)
    assert not gated_flags(argv, release)
    assert (ENABLE_PD_ROLE_SWITCH in argv) == (release.role_switch and role != "regular")
    config = parse_args([*argv[len(FAKE) :], "--fake-version", version])  # the fake's strict parser accepts it
    assert config.disaggregation_mode == ("null" if role == "regular" else role)


def test_the_fake_rejects_a_flag_its_release_does_not_have(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--model-path", "m", "--enable-pd-role-switch", "--fake-version", "0.5.8"])
    assert exit_.value.code == 2 and "unrecognized arguments: --enable-pd-role-switch" in capsys.readouterr().err
    assert parse_args(["--enable-pd-role-switch", "--fake-version", "0.5.23"]).enable_pd_role_switch


def test_check_argv_reports_the_parser_s_refusal() -> None:
    good = server_argv(spec("prefill", "0.5.8"), FAKE)[len(FAKE) :]
    check_argv(good, launch_parser("0.5.8"))
    with pytest.raises(SGLangCompatibilityError, match="unrecognized arguments: --enable-pd-role-switch"):
        check_argv([*good, "--enable-pd-role-switch"], launch_parser("0.5.8"))
    with pytest.raises(SGLangCompatibilityError, match="invalid choice: 'mori'"):
        check_argv([*good, "--disaggregation-transfer-backend", "mori"], launch_parser("0.5.8"))


def test_launch_argv_passes_the_installed_sglang_s_own_parser() -> None:
    """Runs where SGLang is installed and importable (the ``sglang`` extra, GPU machines)."""
    if sglang_parser() is None:
        pytest.skip("sglang is not importable here: the argv is checked against the release table only")
    version = installed_version()
    assert version is not None
    for role in ("regular", "prefill", "decode"):
        check_argv(server_argv(spec(role, version), SGLANG)[len(SGLANG) :], sglang_parser())  # type: ignore[arg-type]
        for tp, dp, ep in [(2, 1, 1), (4, 2, 1), (8, 8, 8), (4, 1, 4)]:  # worker sizes, as the release spells them
            sized = dataclasses.replace(spec(role, version), gpu_ids=tuple(range(tp)), dp=dp, ep=ep)
            check_argv(server_argv(sized, SGLANG)[len(SGLANG) :], sglang_parser())  # type: ignore[arg-type]
