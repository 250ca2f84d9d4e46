"""The results pages (docs/results/*.md) are what `python -m el_jax.report` makes of the
experiments' analysis.json files through the Jinja2 templates.

If `test_committed_pages_are_what_the_json_gives` fails, an analysis or a template changed
without the pages being regenerated: run `python -m el_jax.report` and commit docs/results/.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from el_jax.report import formats
from el_jax.report import render

ROOT = render.ROOT
DOCS = os.path.join(ROOT, render.DOCS)


def _copy_root(tmp_path):
  """A copy of what the generator reads (results/, docs/results/, the sections, the README)."""
  shutil.copytree(os.path.join(ROOT, render.RESULTS), tmp_path / render.RESULTS)
  shutil.copytree(DOCS, tmp_path / render.DOCS)
  shutil.copytree(os.path.join(ROOT, render.EXPERIMENTS), tmp_path / render.EXPERIMENTS,
                  ignore=shutil.ignore_patterns("*.py", "__pycache__"))
  if os.path.isdir(os.path.join(ROOT, render.TOOLS)):
    shutil.copytree(os.path.join(ROOT, render.TOOLS), tmp_path / render.TOOLS,
                    ignore=shutil.ignore_patterns("*.py", "__pycache__"))
  shutil.copy(os.path.join(ROOT, render.README), tmp_path / render.README)
  return tmp_path


def test_committed_pages_are_what_the_json_gives():
  pages = render.render_all(ROOT)
  assert sorted(pages) == sorted([f"{p}.md" for p in render.PAGES] + [render.INDEX])
  bad = render.differing(pages, DOCS)
  assert not bad, (f"docs/results/{', docs/results/'.join(bad)} differ from what the JSON under "
                   f"results/ gives: run `python -m el_jax.report` and commit the pages")


def test_the_readme_index_is_what_the_json_gives():
  """The README's index table (paper item -> headline number -> reproduced) is generated."""
  readme = render.readme_with_index(ROOT)
  assert not render.differing({render.README: readme}, ROOT), (
      "README.md's index table differs from what the JSON under results/ gives: run "
      "`python -m el_jax.report` and commit README.md")
  table = readme.split(render.INDEX_BEGIN)[1].split(render.INDEX_END)[0]
  assert "{{" not in table and table.count("\n|") >= 10
  for page in set(re.findall(r"\]\((docs/results/[\w.]+\.md)", table)):
    assert os.path.exists(os.path.join(ROOT, page)), page


def test_the_readme_is_a_door():
  """Under 12 KB, with the two commands and a link to every results page."""
  with open(os.path.join(ROOT, "README.md"), "rb") as fh:
    text = fh.read().decode()
  assert len(text.encode()) < 12 * 1024
  assert "make demo" in text and "make test" in text
  for page in render.PAGES:
    assert f"docs/results/{page}.md" in text, page


def test_every_section_of_every_page_says_what_reproduced():
  env = render.environment(ROOT)
  for page in render.PAGES:
    text, read = render.render_page(env, page, ROOT)
    assert "{{" not in text and "}}" not in text and "{%" not in text, page
    assert read, page
    for section in text.split("\n## ")[1:]:
      title = section.splitlines()[0]
      assert "\nReproduced" in section, f"{page}, section {title!r}: no 'Reproduced ...' line"


def test_changing_a_number_in_an_analysis_changes_the_page(tmp_path):
  root = _copy_root(tmp_path)
  assert render.main(["--root", str(root)]) == 0  # the copy's pages, from the copy's JSON
  path = root / render.RESULTS / "ntp_convergence" / "analysis.json"
  data = json.loads(path.read_text())
  env = render.environment(str(root))
  before, _ = render.render_page(env, "seed003_linear_ntp", str(root))
  data["runs"]["fig1"]["gd"]["cos_mm"] = 0.123456
  path.write_text(json.dumps(data))
  after, _ = render.render_page(render.environment(str(root)), "seed003_linear_ntp", str(root))
  assert after != before
  assert "cos(W_k, W_mm) = 0.123" in " ".join(after.split())
  # --check names exactly the changed page and the README (its index quotes that number), one
  # line each
  proc = subprocess.run([sys.executable, "-m", "el_jax.report", "--check", "--root", str(root)],
                        capture_output=True, text=True)
  assert proc.returncode == 1
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 2, proc.stderr
  assert "seed003_linear_ntp.md" in lines[0] and lines[1].startswith("README.md"), proc.stderr
  assert all("python -m el_jax.report" in line for line in lines)
  # writing fixes it
  assert render.main(["--root", str(root)]) == 0
  assert render.main(["--check", "--root", str(root)]) == 0


@pytest.mark.parametrize("line, words", [
    ("{{ A.ntp_convergence.runs.fig1.gd.nope | f }}", ["seed003", "has no attribute 'nope'"]),
    ("{{ A.no_such_experiment.x | f }}", ["results/no_such_experiment/analysis.json does not "
                                          "exist", "--stage=analyze"]),
    ("{{ A.ntp_convergence.runs.fig1.gd.gap | no_such_format }}", ["no_such_format"]),
    ("{{ image('demo/missing.png') }}", ["results/demo/missing.png does not exist"]),
    ("{{ paper('s999.nothing') }}", ["no paper number 's999.nothing'"]),
    ("{% for x in %}", ["seed003_linear_ntp.md:3"]),
])
def test_a_template_that_does_not_render_names_its_file_line_and_cause(tmp_path, line, words):
  root = _copy_root(tmp_path)
  tpl = root / render.TEMPLATES / "seed003_linear_ntp.md"
  tpl.write_text(f"# Seed 003\n\n{line}\n")
  with pytest.raises(render.ReportError) as e:
    render.render_page(render.environment(str(root)), "seed003_linear_ntp", str(root))
  msg = str(e.value)
  for w in words:
    assert w in msg, (w, msg)
  # the command line prints it as one `error:` line, exit status 2
  proc = subprocess.run([sys.executable, "-m", "el_jax.report", "--root", str(root)],
                        capture_output=True, text=True)
  assert proc.returncode == 2
  assert proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1, (
      proc.stderr)


def test_a_missing_key_names_the_template_and_line(tmp_path):
  root = _copy_root(tmp_path)
  tpl = root / render.TEMPLATES / "seed003_linear_ntp.md"
  tpl.write_text("# Seed 003\n\nline two\n{{ A.ntp_convergence.nope | f }}\n")
  with pytest.raises(render.ReportError) as e:
    render.render_page(render.environment(str(root)), "seed003_linear_ntp", str(root))
  assert str(e.value).startswith("docs/results/templates/seed003_linear_ntp.md:4: "), e.value


def test_a_dict_key_named_like_a_method_is_the_key(tmp_path):
  env = render.environment(ROOT)
  tpl = env.from_string("{{ d.items }} {{ d.values | f(1) }}")
  assert tpl.render(d={"items": 3, "values": 0.25}) == "3 0.2"


def test_the_generator_does_not_import_jax(tmp_path):
  code = ("import sys\nfrom el_jax.report import render\n"
          f"rc = render.main(['--out', {str(tmp_path)!r}])\n"
          "print(rc, sorted(m for m in sys.modules if m.split('.')[0] in "
          "('jax', 'jaxlib', 'flax', 'optax', 'orbax', 'tensorflow')))")
  env = {k: v for k, v in os.environ.items() if not k.startswith("JAX")}
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                        cwd=ROOT)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.strip() == "0 []", (proc.stdout, proc.stderr)
  assert sorted(os.listdir(tmp_path)) == sorted([f"{p}.md" for p in render.PAGES] +
                                                [render.INDEX])


def test_every_embedded_image_and_relative_link_exists():
  seen_images = 0
  for name in sorted(os.listdir(DOCS)):
    if not name.endswith(".md"):
      continue
    text = open(os.path.join(DOCS, name)).read()
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
      if target.startswith(("http://", "https://")):
        continue
      path = os.path.normpath(os.path.join(DOCS, target))
      assert os.path.exists(path), f"{name}: {target}"
      seen_images += target.endswith(".png")
  assert seen_images >= 10


def test_the_formats():
  """Every filter of the pages, on the values it is made for."""
  assert formats.f(0.47312) == "0.473" and formats.f(None) == "n/a" and formats.f(2.5, 0) == "2"
  assert formats.f([0.1, 0.25]) == "0.100 / 0.250"
  assert formats.sf(0.2801) == "+0.280" and formats.sf(-0.0004, 4) == "-0.0004"
  assert formats.p(1.0825e-05) == "1.1e-05" and formats.p(0.0625) == "0.062"
  assert formats.mr({"mean": 0.408, "min": 0.2121, "max": 0.576}) == "0.408 (0.212, 0.576)"
  assert formats.ci([0.19444, 0.369]) == "[+0.194, +0.369]"
  assert formats.seeds([2, 3, 4, 5]) == "2-5" and formats.seeds([0, 2]) == "0, 2"
  assert formats.seeds([0, 1]) == "0, 1"
  assert formats.thousands(12345.4) == "12,345" and formats.pct(0.6) == "60.0%"
  assert formats.ratio(1.236) == "1.24x" and formats.e(0.000743, 1) == "7.4e-04"
  assert formats.g(3.0, 2) == "3" and formats.sig(1234.5) == "1234" and formats.sig(1.23456) == "1.23"
  assert formats.ran_on(["a", "b"]) == "*Ran on: a; b.*" and formats.ran_on([]) == ""
  unpaired = {"diff": 0.28, "ci95": [0.194, 0.369], "p_value": 2 / 184756, "n_a": 10, "n_b": 10,
              "p_holm": 0.00013}
  assert formats.cmp_cell(unpaired) == (
      "+0.280 [+0.194, +0.369], p = 1.1e-05 (floor of 10 vs 10) (Holm 0.00013)")
  paired = {"diff": -0.01, "ci95": None, "p_value": 0.25, "n": 3}
  assert formats.cmp_cell(paired) == "-0.010, p = 0.25 (floor of 3 pairs)"
  assert formats.ci_cell(paired) == "none at n = 3"
  assert formats.p_note({"p_holm": 0.5, "n": 3}, "p_holm", m=2) == "0.5 (floor of 3 pairs, Holm over 2)"
  c = {"diff": 0.4, "ci95": [0.3, 0.5], "p_value": 2 / 252, "p_holm": 3 * 2 / 252, "n_a": 5,
       "n_b": 5}
  assert formats.cmp_cell(c, m=3) == ("+0.400 [+0.300, +0.500], p = 0.0079 (floor of 5 vs 5) "
                                      "(Holm 0.024 (floor of 5 vs 5, Holm over 3))")
  c3 = {"diff": 0.006, "ci95": [0.001, 0.01], "p_value": 0.1, "p_holm": 0.3, "n_a": 3, "n_b": 3}
  assert formats.cmp_cell(c3, m=3) == ("+0.006, p = 0.1 (floor of 3 vs 3) "
                                       "(Holm 0.3 (floor of 3 vs 3, Holm over 3))")
  assert formats.p_note({**c, "p_value": 0.2}) == "0.2"
