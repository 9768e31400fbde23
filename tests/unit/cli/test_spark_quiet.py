"""``log_config``'s Spark configuration directory: what the JVM reads at its start, gone when the run ends."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fsm_consumer.cli._spark_quiet import log_config

SHOW_AND_EXIT = """
import os
from fsm_consumer.cli._spark_quiet import log_config
log_config("warn")
conf = os.environ["SPARK_CONF_DIR"]
print(conf, open(os.path.join(conf, "log4j2.properties")).read().splitlines()[0])
"""


def test_the_configuration_is_there_while_the_run_lasts_and_removed_at_its_end():
    env = {k: v for k, v in os.environ.items() if k != "SPARK_CONF_DIR"}
    done = subprocess.run([sys.executable, "-c", SHOW_AND_EXIT], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    conf, first = done.stdout.split(maxsplit=1)
    assert first.strip() == "rootLogger.level = warn"
    assert not Path(conf).exists(), f"{conf} left behind"


def test_a_users_own_configuration_rules(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    log_config("error")
    assert os.environ["SPARK_CONF_DIR"] == str(tmp_path) and not list(tmp_path.iterdir())


def test_an_unknown_level_is_refused_naming_the_option():
    with pytest.raises(SystemExit, match="--spark-log-level 'loud'"):
        log_config("loud")
