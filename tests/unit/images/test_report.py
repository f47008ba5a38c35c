from trainstack.matrix import REPO_ROOT, load_matrix
from trainstack.report import flavor_table, with_matrix_table


def test_readme_table_is_generated_from_the_matrix():
    readme = (REPO_ROOT / "README.md").read_text()
    assert with_matrix_table(readme, load_matrix()) == readme, "run `invoke docs`"


def test_table_has_a_row_per_flavor():
    table = flavor_table(load_matrix())
    assert "| cpu | 3.11 | 2.13.0+cpu | 2.21.0 | 0.28.1 | 4.3.0 |" in table
    assert "| gpu-cu13 | 3.11 | 2.13.0 | - |" in table
