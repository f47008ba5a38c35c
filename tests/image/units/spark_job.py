"""A local PySpark job: a DataFrame aggregation and an RDD reduction."""
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

spark = SparkSession.builder.master("local[2]").appName("trainstack-image-test").getOrCreate()
frame = spark.range(1000).withColumn("bucket", F.col("id") % 10)
counts = {row["bucket"]: row["count"] for row in frame.groupBy("bucket").count().collect()}
assert counts == {b: 100 for b in range(10)}, counts
total = spark.sparkContext.parallelize(range(101), 4).reduce(lambda a, b: a + b)
assert total == 5050, total
print(f"spark {spark.version} ok", flush=True)
spark.stop()
