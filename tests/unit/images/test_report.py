from trainstack.docs import flavor_table, with_generated_tables, workflow_table
from trainstack.matrix import REPO_ROOT, load_matrix
from trainstack.workflows import WORKFLOWS


def test_readme_tables_are_generated():
    readme = (REPO_ROOT / "README.md").read_text()
    assert with_generated_tables(readme, load_matrix(), WORKFLOWS) == readme, "run `invoke docs`"


def test_workflow_table_has_a_row_per_workflow_with_its_command():
    table = workflow_table(WORKFLOWS)
    assert len(table.splitlines()) == 2 + len(WORKFLOWS)
    assert "| horovod-torch-mpirun | Horovod images: `mpirun -np 2 python train.py` | `mpirun -np 2 python " in table


def test_table_has_a_row_per_flavor():
    table = flavor_table(load_matrix())
    assert "| cpu | 3.11 | 2.13.0+cpu | 2.21.0 | 0.28.1 | 4.3.0 |" in table
    assert "| gpu-cu13 | 3.11 | 2.13.0 | - |" in table
