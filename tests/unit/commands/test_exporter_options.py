"""trace's exporter options: plain HTTP stays on loopback, TLS and a token beyond it, bad values are usage errors.

Checked in-process through the trace parser and ``plan_exporters``, which
trace runs before anything is loaded or recorded.
"""

from __future__ import annotations

import argparse
import socket
import ssl
from pathlib import Path

import pytest

from gpuscope.cli import build_parser
from gpuscope.commands._exporters import plan_exporters
from gpuscope.errors import EXIT_USAGE, UsageError
from gpuscope.fleet.certs import init_fleet

TOKEN = "a-token-of-more-than-sixteen-characters"


def _args(*argv: str) -> argparse.Namespace:
    return build_parser("trace").parse_args(["trace", *argv, "--", "true"])


def _refused(*argv: str) -> UsageError:
    with pytest.raises(UsageError) as err:
        plan_exporters(_args(*argv))
    assert err.value.exit_code == EXIT_USAGE
    return err.value


@pytest.fixture
def server_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(certificate, key, CA) of a server named localhost / 127.0.0.1."""
    issued = init_fleet(tmp_path / "pki", ["localhost"], ["127.0.0.1"])
    cert, key = issued.servers["localhost"]
    return cert, key, issued.ca


@pytest.fixture(autouse=True)
def no_token_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUSCOPE_TOKEN", raising=False)


@pytest.mark.parametrize(
    "url",
    ["http://10.0.0.7:4318", "http://otel-collector:4318/v1/metrics", "http://[2001:db8::1]:4318"],
)
def test_plain_http_to_another_host_is_refused_even_with_otlp_insecure(url: str) -> None:
    err = _refused("--otlp", url, "--otlp-insecure")
    assert str(err).startswith(f"--otlp {url}:") and "loopback" in str(err)
    assert "--insecure" in err.remedy


def test_plain_http_needs_otlp_insecure_even_on_loopback() -> None:
    err = _refused("--otlp", "http://127.0.0.1:4318")
    assert "in clear" in str(err) and "--otlp-insecure" in err.remedy


@pytest.mark.parametrize(
    "url",
    ["otel:4318", "ftp://otel:4318", "https://", "https://otel:99999", "https:///v1/metrics", "not a url"],
)
def test_a_url_that_is_not_an_http_receiver_is_refused(url: str) -> None:
    err = _refused("--otlp", url)
    assert str(err).startswith(f"--otlp {url}:") and "http(s) URL" in str(err)


def test_credentials_in_the_url_are_refused_with_the_headers_variable_as_the_fix() -> None:
    err = _refused("--otlp", "https://user:secret@otel:4318")
    assert "OTEL_EXPORTER_OTLP_HEADERS" in err.remedy


@pytest.mark.parametrize(
    ("argv", "endpoint"),
    [
        (["--otlp", "https://otel:4318"], "https://otel:4318/v1/metrics"),
        (["--otlp", "https://otel:4318/"], "https://otel:4318/v1/metrics"),
        (["--otlp", "https://otel.example/otlp"], "https://otel.example/otlp/v1/metrics"),
        (["--otlp", "https://otel:4318/v1/metrics"], "https://otel:4318/v1/metrics"),
        (["--otlp", "http://127.0.0.1:4318", "--otlp-insecure"], "http://127.0.0.1:4318/v1/metrics"),
        (["--otlp", "http://[::1]:4318", "--otlp-insecure"], "http://[::1]:4318/v1/metrics"),
        (["--otlp", "http://10.0.0.7:4318", "--otlp-insecure", "--insecure"], "http://10.0.0.7:4318/v1/metrics"),
    ],
)
def test_an_accepted_url_is_pushed_to_its_metrics_path(argv: list[str], endpoint: str) -> None:
    plan = plan_exporters(_args(*argv))
    assert plan.otlp is not None and plan.otlp.endpoint == endpoint
    assert plan.otlp.interval_ns == 10_000_000_000


def test_the_interval_is_a_duration_of_at_least_a_second() -> None:
    plan = plan_exporters(_args("--otlp", "https://otel:4318", "--otlp-interval", "1m30s"))
    assert plan.otlp is not None and plan.otlp.interval_ns == 90_000_000_000
    assert str(_refused("--otlp", "https://otel:4318", "--otlp-interval", "soon")).startswith("--otlp-interval soon")
    assert "at least 1s" in str(_refused("--otlp", "https://otel:4318", "--otlp-interval", "500ms"))


@pytest.mark.parametrize(
    "argv",
    [
        ["--otlp-insecure"],
        ["--otlp-interval", "5s"],
        ["--prometheus-tls-cert", "c.pem", "--prometheus-tls-key", "k.pem"],
        ["--prometheus-token-file", "t"],
    ],
)
def test_an_exporter_option_without_its_exporter_is_refused(argv: list[str]) -> None:
    assert "without --" in str(_refused(*argv))


def test_https_to_a_collector_with_otlp_insecure_is_refused_as_a_contradiction() -> None:
    assert "--otlp-insecure is for http://" in str(_refused("--otlp", "https://otel:4318", "--otlp-insecure"))


@pytest.mark.parametrize("address", ["0.0.0.0:9464", "10.0.0.7:9464", ":9464", "[::]:9464"])
def test_prometheus_beyond_loopback_without_tls_and_token_is_refused_with_the_fix(address: str) -> None:
    err = _refused("--prometheus", address)
    assert "HTTPS with a token" in str(err)
    assert "--prometheus-tls-cert" in err.remedy and "--prometheus-token-file" in err.remedy


def test_prometheus_on_loopback_stays_plain_http_without_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSCOPE_TOKEN", TOKEN)  # a token over plain HTTP would travel in clear: not used
    plan = plan_exporters(_args("--prometheus", "127.0.0.1:9464"))
    assert plan.prometheus is not None
    assert (plan.prometheus.host, plan.prometheus.port, plan.prometheus.tls, plan.prometheus.token) == (
        "127.0.0.1",
        9464,
        None,
        None,
    )


def test_insecure_allows_plain_prometheus_beyond_loopback() -> None:
    plan = plan_exporters(_args("--prometheus", "0.0.0.0:9464", "--insecure"))
    assert plan.prometheus is not None and plan.prometheus.tls is None and plan.prometheus.token is None


def test_prometheus_over_tls_takes_the_token_from_a_private_file(
    tmp_path: Path, server_files: tuple[Path, Path, Path]
) -> None:
    cert, key, ca = server_files
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    plan = plan_exporters(
        _args(
            "--prometheus", "0.0.0.0:9464", "--prometheus-tls-cert", str(cert), "--prometheus-tls-key", str(key),
            "--prometheus-ca-cert", str(ca), "--prometheus-token-file", str(token_file),
        )
    )  # fmt: skip
    assert plan.prometheus is not None and plan.prometheus.token == TOKEN
    tls = plan.prometheus.tls
    assert tls is not None and tls.minimum_version is ssl.TLSVersion.TLSv1_3
    assert tls.verify_mode is ssl.CERT_REQUIRED  # mutual TLS with --prometheus-ca-cert


def test_prometheus_over_tls_takes_the_token_from_the_environment(
    server_files: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key, _ = server_files
    monkeypatch.setenv("GPUSCOPE_TOKEN", TOKEN)
    plan = plan_exporters(
        _args("--prometheus", "0.0.0.0:9464", "--prometheus-tls-cert", str(cert), "--prometheus-tls-key", str(key))
    )
    assert plan.prometheus is not None and plan.prometheus.token == TOKEN


def test_prometheus_over_tls_without_a_token_is_refused(server_files: tuple[Path, Path, Path]) -> None:
    cert, key, _ = server_files
    err = _refused("--prometheus", "0.0.0.0:9464", "--prometheus-tls-cert", str(cert), "--prometheus-tls-key", str(key))
    assert "need a token" in str(err) and "GPUSCOPE_TOKEN" in err.remedy


def test_a_token_file_others_can_read_is_refused(tmp_path: Path, server_files: tuple[Path, Path, Path]) -> None:
    cert, key, _ = server_files
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o644)
    err = _refused(
        "--prometheus", "0.0.0.0:9464", "--prometheus-tls-cert", str(cert), "--prometheus-tls-key", str(key),
        "--prometheus-token-file", str(token_file),
    )  # fmt: skip
    assert str(err).startswith(f"--prometheus-token-file {token_file}: readable by other users")


def test_tls_file_errors_name_the_prometheus_options(
    tmp_path: Path, server_files: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, _, _ = server_files
    monkeypatch.setenv("GPUSCOPE_TOKEN", TOKEN)
    assert "go together" in str(_refused("--prometheus", "127.0.0.1:9464", "--prometheus-tls-cert", str(cert)))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key")
    err = _refused(
        "--prometheus", "127.0.0.1:9464", "--prometheus-tls-cert", str(cert), "--prometheus-tls-key", str(garbage)
    )
    assert str(err).startswith(f"--prometheus-tls-cert {cert} / --prometheus-tls-key {garbage}: cannot load")


def test_a_token_file_over_plain_http_is_refused(tmp_path: Path) -> None:
    err = _refused("--prometheus", "127.0.0.1:9464", "--prometheus-token-file", str(tmp_path / "t"))
    assert "in clear" in str(err) and "--prometheus-tls-cert" in err.remedy


def test_a_prometheus_port_in_use_is_refused_before_anything_is_attached() -> None:
    # given a port another program listens on
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # then planning the trace (which runs before any probe) refuses it, naming the address
        err = _refused("--prometheus", f"127.0.0.1:{port}")
    assert str(err) == f"--prometheus 127.0.0.1:{port}: cannot listen: Address already in use"
    assert err.remedy == "choose another port"


def test_a_prometheus_host_that_does_not_resolve_is_refused() -> None:
    err = _refused("--prometheus", "no-such-host.invalid:9464", "--insecure")
    assert str(err).startswith("--prometheus no-such-host.invalid:9464: cannot resolve no-such-host.invalid")
