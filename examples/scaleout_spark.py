"""A bundle on Spark:  python examples/scaleout_spark.py BUNDLE.tar.gz [CORES]   (pip install '.[cpu,spark]')

Makes a local[CORES] Spark session (in spark-submit, the session you are given), ships the archive to every
executor (SparkContext.addFile: each node extracts it once into its cache) and runs the bundle's task as a
predict_batch_udf: embed -> array<float>, cls -> struct<label, score>, token-cls -> struct<entities>,
qa -> struct<answer, start, end, score> (two columns: udf("question", "context")). Each Python worker opens the
bundle once, with spark.task.cpus onnxruntime threads. A bundle folder works too when every executor reads its path.
"""
import os
import sys

from pyspark.sql import SparkSession

from edgebert.scaleout.batch import bundle_task_of
from edgebert.scaleout.spark import bundle_udf, ship_bundle

bundle = sys.argv[1]
cores = int(sys.argv[2]) if len(sys.argv) > 2 else 2
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
spark = (SparkSession.builder.master(f"local[{cores}]").config("spark.task.cpus", "1")
         .config("spark.ui.enabled", "false").getOrCreate())
task = bundle_task_of(bundle)
texts = ["The cat sits on the mat.", "Stocks fell sharply on Monday.", "A kitten is asleep on a rug.",
         "The central bank raised interest rates.", "Heavy rain is expected tomorrow."]
if task == "qa":
    df = spark.createDataFrame([("What fell?", t) for t in texts], ["question", "context"])
    columns = ("question", "context")
else:
    df = spark.createDataFrame([(t,) for t in texts], ["text"])
    columns = ("text",)
udf = bundle_udf(ship_bundle(spark, bundle), task)
out = df.withColumn("result", udf(*columns))       # out.write.parquet("out/") for files
for row in out.collect():
    print(row[columns[-1]][:40], "->", str(row["result"])[:100])
spark.stop()
