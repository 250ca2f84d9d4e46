"""tools/bench: the speed page's section on the E-losses' cost and stacked seeds names logs of
`python -m el_jax.tools.bench` (no JSON, so no numbers on the page); every log it names is
committed."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_log_the_section_names_exists():
  with open(os.path.join(ROOT, "tools", "bench", "page.md")) as f:
    text = f.read()
  names = re.findall(r"`(?:results/bench/)?([\w.]+\.log)`", text)
  assert len(names) == 5, names
  for n in names:
    assert os.path.isfile(os.path.join(ROOT, "results", "bench", n)), n
  assert "{{" not in text  # logs without JSON: no number on the page
