"""A PySpark app for the entrypoint's Kubernetes modes: a standalone driver on fixed ports, whose tasks run
on whatever executor registers with it (an `executor` container), reporting the hosts they ran on."""
import socket
import sys

from pyspark.sql import SparkSession

master, driver_host = sys.argv[1], sys.argv[2]
spark = (SparkSession.builder.master(master).config("spark.driver.host", driver_host)
         .config("spark.driver.port", "40000").config("spark.driver.bindAddress", "0.0.0.0")
         .config("spark.blockManager.port", "40001").getOrCreate())
print("application", spark.sparkContext.applicationId, flush=True)
hosts = spark.sparkContext.parallelize(range(4), 4).map(lambda _: socket.gethostname()).collect()
print("tasks ran on", " ".join(sorted(set(hosts))), flush=True)
spark.stop()
