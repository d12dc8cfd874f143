"""The word count in PyFlink's Python DataStream API, for `cargo xtask bench-languages`:
lines split into words, keyed by word, a KeyedProcessFunction counting each word in a
ValueState and emitting ``word<TAB>count`` on every occurrence (what weir's word count
operators do), written by a FileSink.

    python wordcount.py --input FILE --output DIR [--parallelism 2]

Prints ``net_runtime_seconds=S`` (Flink's own runtime of the job, from running to finished).
"""

import argparse
import sys

from pyflink.common import Encoder, Types, WatermarkStrategy
from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from pyflink.datastream.connectors.file_system import (
    BucketAssigner,
    FileSink,
    FileSource,
    OutputFileConfig,
    StreamFormat,
)
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor


class Count(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, word, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield f"{word}\t{n}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args()

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(RuntimeExecutionMode.STREAMING)
    env.set_parallelism(args.parallelism)
    # The workers run this interpreter (its environment has PyFlink), not the first python.
    env.set_python_executable(sys.executable)
    source = FileSource.for_record_stream_format(
        StreamFormat.text_line_format(), args.input
    ).build()
    lines = env.from_source(source, WatermarkStrategy.no_watermarks(), "lines")
    words = lines.flat_map(lambda line: line.split(), output_type=Types.STRING())
    counts = words.key_by(lambda w: w, key_type=Types.STRING()).process(
        Count(), output_type=Types.STRING()
    )
    sink = (
        FileSink.for_row_format(args.output, Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .with_output_file_config(
            OutputFileConfig.builder().with_part_prefix("part").with_part_suffix(".txt").build()
        )
        .build()
    )
    counts.sink_to(sink)
    result = env.execute("pyflink-wordcount")
    print(f"net_runtime_seconds={result.get_net_runtime() / 1000:.3f}")


if __name__ == "__main__":
    main()
