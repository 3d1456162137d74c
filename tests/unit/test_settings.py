"""Settings declared once: flags, environment variables, --help and the README table all come
from the declarations, old spellings still work (and say so), and a bad value stops start-up
with one line naming the flag or variable it came from."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

import app.main
from app.cli import build_parser, main
from app.domain.cluster import DEFAULT_COUNTS
from app.domain.hosts import HostAddress
from app.domain.txns import DEFAULT_TXN_LIMITS
from app.settings import DECLARATIONS, Setting, SettingError, Settings, resolve
from app.settings.declaration import text
from app.settings.markdown import markdown_table, table_in

README = Path(__file__).resolve().parents[2] / "README.md"

# A valid value that is not the default, for every setting.
SAMPLES = {
    "db_url": "postgresql://someone@dbhost:5433/controller",
    "data_dir": "/var/lib/pgc",
    "embedded_db_restart_attempts": "2",
    "grpc_host": "0.0.0.0",
    "grpc_port": "19090",
    "grpc_max_concurrent_streams": "50",
    "grpc_max_resets_per_window": "400",
    "grpc_max_pings_per_window": "20",
    "grpc_max_settings_per_window": "30",
    "grpc_frame_window_s": "10.5",
    "grpc_max_header_list_bytes": "16384",
    "grpc_max_calls_before_first_reply": "8",
    "grpc_max_replies_building_before_first_reply": "32",
    "grpc_max_unsent_bytes_per_connection": "1048576",
    "grpc_max_unsent_bytes": "33554432",
    "grpc_send_stall_s": "2.5",
    "rest_host": "::",
    "rest_port": "19091",
    "rest_idle_timeout_s": "12.5",
    "rest_body_timeout_s": "7.5",
    "rest_max_connections": "200",
    "grpc_max_connections": "300",
    "fd_reserve": "64",
    "advertise_host": "ctl-1.example",
    "instance_id": "ctl-1",
    "processes": "3",
    "reuse_port": "yes",
    "ready_file": "/run/pgc/ready.json",
    "log_level": "debug",
    "log_format": "json",
    "no_access_log": "yes",
    "access_log_alike_per_second": "25",
    "container_count": "8",
    "segment_store_hosts": "ss-a:12345, ss-b:12346",
    "segment_store_group": "1:2:/tmp/pgc-run/stores",
    "no_metrics": "yes",
    "auth_enabled": "yes",
    "auth_handlers": "site_auth.oidc:make, site_auth.ldap:Handler",
    "auth_token_ttl_s": "30",
    "auth_check_concurrency": "4",
    "auth_check_queue": "16",
    "auth_checks_per_source": "3",
    "auth_failures_per_source_per_s": "0.5",
    "auth_failure_burst_per_source": "5",
    "auth_failures_per_s": "2.5",
    "auth_failure_burst": "10",
    "auth_token_signing_key_file": "/etc/pgc/token-signing.key",
    "tls_enabled": "on",
    "tls_cert_file": "/etc/pgc/tls/server.pem",
    "tls_key_file": "/etc/pgc/tls/server.key",
    "tls_trust_file": "/etc/pgc/tls/ca.pem",
    "tls_protocol_version": "TLSv1.3",
    "no_embedded_segment_store": "yes",
    "segment_store_host": "0.0.0.0",
    "segment_store_port": "22345",
    "segment_store_metrics_port": "16061",
    "segment_store_tail_wait_s": "5",
    "segment_store_tail_linger_s": "0.005",
    "segment_store_timeout_s": "10",
    "segment_store_max_connections": "500",
    "segment_store_hello_timeout_s": "5",
    "segment_store_idle_timeout_s": "90",
    "segment_store_frame_deadline_s": "20",
    "segment_store_untrusted_frame_bytes": "131072",
    "segment_store_frame_budget_bytes": "33554432",
    "segment_store_reply_budget_bytes": "16777216",
    "segment_store_reads_at_once": "4",
    "segment_store_read_index_bytes": "8388608",
    "segment_store_read_index_segment_bytes": "65536",
    "segment_store_read_ahead_bytes": "4194304",
    "tier": "s3",
    "tier_directory": "/srv/chunks",
    "tier_s3_bucket": "streams",
    "tier_s3_prefix": "cluster-a",
    "tier_s3_endpoint": "http://127.0.0.1:9000",
    "tier_s3_region": "eu-west-1",
    "tier_s3_access_key_id": "AKIAEXAMPLE",
    "tier_s3_secret_access_key": "example-secret",
    "tier_chunk_bytes": "1048576",
    "tier_flush_interval_s": "0.5",
    "tier_flush_age_s": "30",
    "tier_gc_grace_s": "30",
    "tier_throttle_bytes": "268435456",
    "tier_throttle_max_delay_s": "2.5",
    "segment_store_heartbeat_s": "1.5",
    "segment_store_expiry_s": "6",
    "segment_store_db_wait_s": "1.5",
    "request_buckets": "32",
    "retention_buckets": "2",
    "watermark_buckets": "50",
    "member_ttl_s": "3.5",
    "rebalance_delay_s": "0",
    "container_rebalance_delay_s": "1.5",
    "cluster_interval_s": "0.25",
    "request_concurrency": "8",
    "request_poll_s": "0.2",
    "request_max_failures": "5",
    "completion_timeout_s": "30",
    "seal_busy_first_s": "0.05",
    "create_takeover_s": "2.5",
    "txn_min_lease_ms": "100",
    "txn_max_lease_ms": "900000",
    "txn_max_execution_bound_ms": "60000",
    "txn_ttl_hours": "2",
    "txn_timeout_grace_ms": "0",
    "retention_frequency_ms": "1000",
    "watermark_period_ms": "500",
    "autoscale_cooldown_s": "0",
    "autoscale_mute_s": "1.5",
    "autoscale_cache_expiry_s": "3",
    "autoscale_cache_cleanup_s": "0.5",
    "autoscale_time_scale": "0.01",
    "shutdown_timeout_s": "2",
    "shutdown_drain_s": "1.5",
    "pool_max_size": "5",
}

# Refused values; "" only on the command line (an empty variable counts as unset), a switch's
# only through its variable (the flag takes no value).
BAD = {
    "embedded_db_restart_attempts": ["0", "-1", "1.5"],
    "grpc_port": ["70000", "-1", "abc", "90.5"],
    "grpc_max_concurrent_streams": ["0", "-1", "many"],
    "grpc_max_resets_per_window": ["0"],
    "grpc_max_pings_per_window": ["0"],
    "grpc_max_settings_per_window": ["0"],
    "grpc_frame_window_s": ["0", "-2.5"],
    "grpc_max_header_list_bytes": ["0", "-1", "8k"],
    "grpc_max_calls_before_first_reply": ["0", "x"],
    "grpc_max_replies_building_before_first_reply": ["0", "-3"],
    "grpc_max_unsent_bytes_per_connection": ["0", "-1"],
    "grpc_max_unsent_bytes": ["0", "1.5"],
    "grpc_send_stall_s": ["0", "-1"],
    "rest_port": ["65536"],
    "rest_idle_timeout_s": ["0", "-1"],
    "rest_body_timeout_s": ["0", "-1"],
    "rest_max_connections": ["0"],
    "grpc_max_connections": ["0"],
    "fd_reserve": ["31"],
    "instance_id": [""],
    "processes": ["0", "-1"],
    "reuse_port": ["perhaps"],
    "log_level": ["LOUD"],
    "log_format": ["xml", "JSON"],
    "container_count": ["0", "four"],
    "segment_store_hosts": ["nohostport", "host:0", ",", ""],
    "segment_store_group": ["1:1:/d", "2:2:/d", "5:2:/d", "a:2:/d", "0:2:", "0:2"],
    "no_metrics": ["perhaps"],
    "auth_enabled": ["perhaps"],
    "no_access_log": ["sometimes"],
    "access_log_alike_per_second": ["-1", "x"],
    "auth_handlers": ["nocolon", "mod:", "a b:c", "mod:attr,:x"],
    "auth_token_ttl_s": ["0", "-5", "1.5"],
    "auth_check_concurrency": ["0", "-1", "1.5"],
    "auth_check_queue": ["-1", "x"],
    "auth_checks_per_source": ["0", "-1"],
    "auth_failures_per_source_per_s": ["0", "-0.5"],
    "auth_failure_burst_per_source": ["0", "-1"],
    "auth_failures_per_s": ["0", "-1"],
    "auth_failure_burst": ["0", "-1"],
    "tls_enabled": ["perhaps"],
    "tls_protocol_version": ["TLSv1.1", "SSLv3", "TLSv1.2,TLSv1.0", ","],
    "no_embedded_segment_store": ["perhaps"],
    "segment_store_port": ["65536", "-1"],
    "segment_store_metrics_port": ["65536", "-1", "any"],
    "segment_store_tail_wait_s": ["0", "30", "45"],
    "segment_store_tail_linger_s": ["-0.001"],
    "segment_store_timeout_s": ["0"],
    "segment_store_max_connections": ["0"],
    "segment_store_hello_timeout_s": ["0"],
    "segment_store_idle_timeout_s": ["0"],
    "segment_store_frame_deadline_s": ["0"],
    "segment_store_untrusted_frame_bytes": ["65535"],
    "segment_store_frame_budget_bytes": ["16777215"],
    "segment_store_reply_budget_bytes": ["4194303"],
    "segment_store_reads_at_once": ["0"],
    "segment_store_read_index_bytes": ["-1", "1.5"],
    "segment_store_read_ahead_bytes": ["-1", "x"],
    "segment_store_read_index_segment_bytes": ["-1", "128M"],
    "tier": ["hdfs", "S3", ""],
    "tier_chunk_bytes": ["0", "-1", "64M"],
    "tier_flush_interval_s": ["0", "-1"],
    "tier_flush_age_s": ["0", "-5"],
    "tier_gc_grace_s": ["0", "never"],
    "tier_throttle_bytes": ["0", "1G"],
    "tier_throttle_max_delay_s": ["0", "-1"],
    "segment_store_heartbeat_s": ["0", "-1"],
    "segment_store_expiry_s": ["0"],
    "segment_store_db_wait_s": ["-1", "soon"],
    "request_buckets": ["0", "4097"],
    "retention_buckets": ["0"],
    "watermark_buckets": ["5000"],
    "member_ttl_s": ["0", "-1", "soon", "inf", "nan"],
    "rebalance_delay_s": ["-0.5"],
    "container_rebalance_delay_s": ["-1"],
    "cluster_interval_s": ["0"],
    "request_concurrency": ["0", "-3"],
    "request_poll_s": ["0"],
    "request_max_failures": ["0", "-1"],
    "completion_timeout_s": ["0", "-5"],
    "seal_busy_first_s": ["0"],
    "create_takeover_s": ["0"],
    "txn_min_lease_ms": ["0", "1.5"],
    "txn_max_lease_ms": ["-1"],
    "txn_max_execution_bound_ms": ["0"],
    "txn_ttl_hours": ["0", "1.5"],
    "txn_timeout_grace_ms": ["-1"],
    "retention_frequency_ms": ["0"],
    "watermark_period_ms": ["0"],
    "autoscale_cooldown_s": ["-1"],
    "autoscale_mute_s": ["-0.5", "soon"],
    "autoscale_cache_expiry_s": ["0"],
    "autoscale_cache_cleanup_s": ["0"],
    "autoscale_time_scale": ["0", "1.5", "-1"],
    "shutdown_timeout_s": ["0"],
    "shutdown_drain_s": ["-1"],
    "pool_max_size": ["1", "0"],
}


def command_of(item: Setting) -> str:
    """The command that reads `item` (a global one: serve, as any other)."""
    return "segment-store" if item.scope == "segment-store" else "serve"


def command_line(item: Setting, value: str, spelling: str | None = None) -> list[str]:
    flag = [spelling or item.flag] if item.is_switch else [spelling or item.flag, value]
    return [*flag, "serve"] if item.scope == "global" else [command_of(item), *flag]


def resolved_settings(
    argv: list[str], environ: dict[str, str] | None = None
) -> tuple[Settings, tuple[str, ...]]:
    resolved = resolve(build_parser().parse_args(argv), environ or {})
    # The instance id is random per process; pin it unless it is what is being compared.
    values = {"instance_id": "pinned", **resolved.values}
    return Settings(**values), resolved.deprecations


def by_name(name: str) -> Setting:
    return next(item for item in DECLARATIONS if item.name == name)


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Settings]]:
    """`main` with a serve that only records the settings it was given."""
    seen: list[Settings] = []

    async def fake_serve(settings: Settings) -> int:
        seen.append(settings)
        return 0

    monkeypatch.setattr(app.main, "serve", fake_serve)
    yield seen


def test_every_setting_has_a_sample_and_every_checked_one_a_refused_value() -> None:
    names = {item.name for item in DECLARATIONS}
    assert set(SAMPLES) == names
    checked = {item.name for item in DECLARATIONS if item.check or item.parse not in (text, Path)}
    assert checked <= set(BAD), checked - set(BAD)


def test_defaults_are_the_ones_the_controller_always_had() -> None:
    settings = Settings()
    assert (settings.grpc_host, settings.grpc_port, settings.rest_host, settings.rest_port) == (
        "127.0.0.1",
        9090,
        "127.0.0.1",
        9091,
    )
    assert settings.db_url is None and settings.data_dir == Path(".pgcontroller")
    assert settings.segment_store_hosts == (HostAddress("127.0.0.1", 12345),)
    assert settings.container_count == 4 and settings.request_concurrency == 64
    assert settings.bucket_counts == DEFAULT_COUNTS
    assert settings.txn_limits == DEFAULT_TXN_LIMITS
    assert (settings.member_ttl_s, settings.rebalance_delay_s, settings.container_rebalance_delay_s) == (
        5.0,
        2.0,
        10.0,
    )
    assert (settings.cluster_interval_s, settings.request_poll_s, settings.seal_busy_first_s) == (
        0.5,
        1.0,
        0.1,
    )
    assert settings.completion_timeout_s == 120.0
    assert (settings.retention_frequency_ms, settings.watermark_period_ms) == (1_800_000, 10_000)
    # Pravega's AutoScalerConfig defaults.
    assert (settings.autoscale_cooldown_s, settings.autoscale_mute_s) == (600.0, 600.0)
    assert (settings.autoscale_cache_expiry_s, settings.autoscale_cache_cleanup_s) == (1200.0, 300.0)
    assert settings.autoscale_time_scale == 1.0
    assert (settings.shutdown_timeout_s, settings.pool_max_size) == (5.0, 20)
    assert settings.log_level == "INFO" and settings.ready_file is None and settings.advertise_host is None
    assert settings.instance_id != Settings().instance_id, "one random instance id per process start"


def test_nothing_given_yields_the_defaults() -> None:
    settings, deprecations = resolved_settings(["serve"])
    assert settings == Settings(instance_id="pinned") and deprecations == ()


@pytest.mark.parametrize("item", DECLARATIONS, ids=lambda item: item.name)
def test_a_flag_and_its_environment_variable_give_the_same_value(item: Setting) -> None:
    sample = SAMPLES[item.name]
    from_flag, _ = resolved_settings(command_line(item, sample))
    from_env, deprecations = resolved_settings([command_of(item)], {item.env: sample})
    assert getattr(from_flag, item.name) != getattr(Settings(), item.name)
    assert from_flag == from_env and deprecations == ()


def test_the_samples_read_as_an_operator_means_them() -> None:
    settings, _ = resolved_settings(["serve"], {by_name(name).env: value for name, value in SAMPLES.items()})
    assert settings.segment_store_hosts == (HostAddress("ss-a", 12345), HostAddress("ss-b", 12346))
    assert settings.data_dir == Path("/var/lib/pgc") and settings.ready_file == Path("/run/pgc/ready.json")
    assert settings.txn_limits.completed_ttl_ms == 2 * 3_600_000
    assert settings.txn_limits.timeout_grace_ms == 0
    assert settings.bucket_counts.requests == 32 and settings.autoscale_time_scale == 0.01
    assert settings.tls_protocol_version == ("TLSv1.3",) and settings.tls_key_file == Path(
        "/etc/pgc/tls/server.key"
    )


OLD_FLAGS = [(item, old) for item in DECLARATIONS for old in item.old_flags]
OLD_ENVS = [(item, old) for item in DECLARATIONS for old in item.old_envs]


def test_the_renamed_spellings_are_exactly_these() -> None:
    assert {old: item.flag for item, old in OLD_FLAGS} == {
        "--member-ttl": "--member-ttl-s",
        "--rebalance-delay": "--rebalance-delay-s",
        "--container-rebalance-delay": "--container-rebalance-delay-s",
        "--completion-timeout": "--completion-timeout-s",
        "--txn-min-lease": "--txn-min-lease-ms",
        "--txn-max-lease": "--txn-max-lease-ms",
    }
    assert {old: item.env for item, old in OLD_ENVS} == {
        "PGCONTROLLER_COMPLETION_TIMEOUT": "PGCONTROLLER_COMPLETION_TIMEOUT_S"
    }


@pytest.mark.parametrize(("item", "old"), OLD_FLAGS, ids=[old for _, old in OLD_FLAGS])
def test_an_old_flag_gives_what_the_new_one_gives_and_says_it_is_old(item: Setting, old: str) -> None:
    sample = SAMPLES[item.name]
    new, quiet = resolved_settings(command_line(item, sample))
    same, deprecations = resolved_settings(command_line(item, sample, spelling=old))
    assert same == new and quiet == ()
    assert deprecations == (f"{old} is deprecated; use {item.flag}",)


@pytest.mark.parametrize(("item", "old"), OLD_ENVS, ids=[old for _, old in OLD_ENVS])
def test_an_old_variable_gives_what_the_new_one_gives_and_says_it_is_old(item: Setting, old: str) -> None:
    sample = SAMPLES[item.name]
    new, _ = resolved_settings(["serve"], {item.env: sample})
    same, deprecations = resolved_settings(["serve"], {old: sample})
    assert same == new
    assert deprecations == (f"{old} is deprecated; use {item.env}",)
    # The new name wins over the old one.
    both, _ = resolved_settings(["serve"], {item.env: sample, old: "7"})
    assert both == new


def test_the_old_integer_forms_of_renamed_flags_still_parse() -> None:
    settings, _ = resolved_settings(
        ["serve", "--completion-timeout", "5", "--member-ttl", "1", "--txn-min-lease", "100"]
    )
    assert settings.completion_timeout_s == 5.0 and settings.member_ttl_s == 1.0
    assert settings.txn_min_lease_ms == 100


def test_a_flag_wins_over_its_variable_and_an_empty_variable_counts_as_unset() -> None:
    settings, _ = resolved_settings(
        ["serve", "--grpc-port", "1234"], {"PGCONTROLLER_GRPC_PORT": "4321", "PGCONTROLLER_DB_URL": ""}
    )
    assert settings.grpc_port == 1234 and settings.db_url is None


def test_variables_of_settings_a_command_does_not_declare_are_not_read() -> None:
    args = build_parser().parse_args(["db", "url", "--data-dir", "/d"])
    resolved = resolve(args, {"PGCONTROLLER_GRPC_PORT": "not a port", "PGCONTROLLER_DB_URL": "x"})
    assert set(resolved.names) == {"log_level", "log_format", "data_dir"}
    assert resolved.values == {"data_dir": Path("/d")}


def test_the_shared_flags_of_the_db_and_dev_commands_come_from_the_same_declarations() -> None:
    for argv in (
        ["db", "start"],
        ["db", "upgrade"],
        ["db", "create-analyst", "someone"],
        ["dev", "seed", "--streams", "1"],
    ):
        resolved = resolve(build_parser().parse_args(argv), {"PGCONTROLLER_DATA_DIR": "/from/env"})
        assert resolved.values["data_dir"] == Path("/from/env"), argv
    pipeline = resolve(build_parser().parse_args(["pipeline", "run", "--out", "o", "--db-url", "u"]), {})
    assert pipeline.names == ("log_level", "log_format")


@pytest.mark.parametrize(
    ("item", "value"),
    [(by_name(name), value) for name, values in BAD.items() for value in values],
    ids=[f"{name}={value!r}" for name, values in BAD.items() for value in values],
)
def test_a_refused_value_is_one_line_naming_its_flag_or_variable(
    item: Setting, value: str, capsys: pytest.CaptureFixture[str], served: list[Settings]
) -> None:
    attempts = []
    if not item.is_switch:
        attempts.append(([], command_line(item, value), item.flag))
        attempts += [([], command_line(item, value, spelling=old), old) for old in item.old_flags]
    if value:
        attempts.append(([(item.env, value)], [command_of(item)], item.env))
        attempts += [([(old, value)], ["serve"], old) for old in item.old_envs]
    assert attempts
    for environ, argv, named in attempts:
        with pytest.MonkeyPatch.context() as patch:
            for variable, text_value in environ:
                patch.setenv(variable, text_value)
            assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"pgcontroller: {named} ") and err.count("\n") == 1, err
        assert "Traceback" not in err
    assert served == []


def test_leases_must_be_ordered() -> None:
    with pytest.raises(SettingError, match=r"^--txn-min-lease-ms must not exceed --txn-max-lease-ms"):
        resolved_settings(["serve", "--txn-min-lease-ms", "700000"])
    with pytest.raises(SettingError, match=r"^--txn-min-lease-ms must not exceed --txn-max-lease-ms"):
        resolved_settings(["serve", "--txn-max-lease-ms", "5000"])
    assert resolved_settings(["serve", "--txn-min-lease-ms", "5000", "--txn-max-lease-ms", "5000"])


def test_a_segments_read_index_budget_fits_the_whole_budget() -> None:
    refusal = r"^--segment-store-read-index-segment-bytes must not exceed --segment-store-read-index-bytes"
    with pytest.raises(SettingError, match=refusal):
        resolved_settings(["serve", "--segment-store-read-index-bytes", "1000"])
    assert resolved_settings(
        ["serve", "--segment-store-read-index-bytes", "0", "--segment-store-read-index-segment-bytes", "0"]
    )


def test_settings_built_in_code_are_checked_too_and_take_keywords_only() -> None:
    with pytest.raises(SettingError, match=r"^--grpc-port must be 0\.\.65535, got 70000$"):
        Settings(grpc_port=70000)
    base = Settings(db_url="postgresql://x", request_poll_s=0.2)
    assert dataclasses.replace(base, member_ttl_s=1.0).member_ttl_s == 1.0
    with pytest.raises(SettingError, match="--member-ttl-s must be positive"):
        dataclasses.replace(base, member_ttl_s=0.0)
    with pytest.raises(TypeError):
        Settings("postgresql://x")  # type: ignore[misc]


def test_main_serves_the_resolved_settings_and_logs_one_line_per_old_spelling(
    served: list[Settings], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGCONTROLLER_COMPLETION_TIMEOUT", "9")
    with caplog.at_level(logging.WARNING):
        code = main(["serve", "--member-ttl", "2", "--ready-file", "r.json", "--rebalance-delay-s", "1"])
    assert code == 0
    [settings] = served
    assert (settings.member_ttl_s, settings.completion_timeout_s, settings.rebalance_delay_s) == (
        2.0,
        9.0,
        1.0,
    )
    assert settings.ready_file == Path("r.json")
    deprecations = [record.getMessage() for record in caplog.records if "deprecated" in record.getMessage()]
    assert sorted(deprecations) == [
        "--member-ttl is deprecated; use --member-ttl-s",
        "PGCONTROLLER_COMPLETION_TIMEOUT is deprecated; use PGCONTROLLER_COMPLETION_TIMEOUT_S",
    ]


def _help(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "1000")  # no wrapping, so names are never split
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_help_lists_every_setting_with_its_variable_and_default(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = {
        scope: " ".join(_help(argv, capsys, monkeypatch).partition("options:")[2].split())
        for scope, argv in (
            ("serve", ["serve", "--help"]),
            ("global", ["--help"]),
            ("segment-store", ["segment-store", "--help"]),
        )
    }
    for item in DECLARATIONS:
        options = texts[item.scope]
        invocation = item.flag if item.is_switch else f"{item.flag} {item.metavar_text}"
        described = options[options.index(invocation + " ") :]
        notes = described[described.index("(env ") :]
        assert notes.startswith(f"(env {item.env}; default {item.shown().replace('`', '')}"), item.name
        formerly = notes[: notes.index(")")]
        for old in item.old_flags + item.old_envs:
            assert old in formerly, item.name
        # The old spellings are accepted but not offered as options of their own.
        for old in item.old_flags:
            assert f" {old} " not in options.replace(formerly, ""), old


def test_the_readme_table_is_the_generated_one() -> None:
    assert table_in(README.read_text(encoding="utf-8")) == markdown_table(), (
        "README.md's Configuration table is stale: run `python -m app.settings --update-readme README.md`"
    )


def test_the_generated_table_has_a_row_per_setting_with_its_names_and_default() -> None:
    rows = markdown_table().splitlines()[2:]
    assert len(rows) == len(DECLARATIONS)
    for item, row in zip(DECLARATIONS, rows, strict=True):
        assert row.startswith(f"| `{item.flag}") and f"`{item.env}`" in row and item.shown() in row
