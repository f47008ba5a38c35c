"""The image works the same from every shell a job spec or a person uses, and Spark writes where its
user can: login shells keep the venv and the image's environment; local-cluster runs as `trainer`."""
import pytest

JOB = ["trainrun", "mpi", "-np", "2", "python", "/units/rank_env.py"]
# Two cores run two ranks (and a JVM): one thread per rank, and test JVMs that start fast.
JOB_ENV = {"OMP_NUM_THREADS": "1", "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


@pytest.mark.parametrize("shell", [["bash", "-lc"], ["sh", "-c"], ["bash", "-c"]])
def test_a_two_rank_job_runs_from_the_shell(in_image, shell):
    output = in_image.run([*shell, " ".join(JOB)], env=JOB_ENV)
    assert output.count("rank-env ") == 2, output[-3000:]


def test_login_shell_of_su_keeps_the_images_environment(in_image):
    script = "command -v python trainrun horovodrun mpirun; echo $PIP_CONSTRAINT $PYSPARK_PYTHON $SPARK_WORKER_DIR"
    output = in_image.run(["su", "-", "trainer", "-c", script], user="root")
    assert output.split() == ["/opt/venv/bin/python", "/opt/venv/bin/trainrun", "/opt/venv/bin/horovodrun",
                              "/usr/bin/mpirun", "/etc/trainstack/constraints.txt", "/opt/venv/bin/python",
                              "/tmp/spark/work"], output


# Long: in CI, Spark's local-cluster runs as `trainer` under the Ray on Spark workflow row and its image test.
@pytest.mark.long
def test_torch_distributor_on_local_cluster_as_the_images_user(in_image):
    output = in_image.run(["python", "/opt/trainstack/examples/torch_distributor_mnist.py", "--master",
                           "local-cluster[2,1,1024]"], env=JOB_ENV, timeout=600)
    assert '"ranks": 2' in output, output[-3000:]
