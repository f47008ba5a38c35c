"""Each rank contributes rank+1; the summed allreduce must equal size*(size+1)/2."""
import horovod.tensorflow as hvd
import tensorflow as tf

hvd.init()
result = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum)
expected = hvd.size() * (hvd.size() + 1) / 2
assert float(result[0]) == expected, (float(result[0]), expected)
print(f"tf rank {hvd.rank()}/{hvd.size()} allreduce={float(result[0])}", flush=True)
