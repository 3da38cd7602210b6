# docs/python.md's examples, run as written: every ```python block, in order, in one namespace,
# from the repository's root.
import os
import re

from conftest import ROOT


def test_the_examples_in_docs_python_md_run_as_written(capsys):
    text = (ROOT / "docs" / "python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 8
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        namespace = {}
        for i, block in enumerate(blocks):
            exec(compile(block, f"docs/python.md, example {i + 1}", "exec"), namespace)
    finally:
        os.chdir(here)
    out = capsys.readouterr().out
    assert "linear_attn 4096" in out and "nats per token" in out
