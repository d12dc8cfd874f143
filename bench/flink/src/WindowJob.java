import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.fs.Path;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.SlidingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.WindowAssigner;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;

/**
 * A keyed event-time window count: {@code key,timestamp} lines, watermarks bounded out of
 * order by {@code --delay} ms, a tumbling or sliding window per key counting its records,
 * each result written as {@code <key>\t<start>,<end>,<count>} (weir's window results).
 *
 * <pre>
 * java -cp CLASSPATH WindowJob --window tumbling:60000 | sliding:60000:10000 --delay MS
 *     --input DIR --output DIR [--parallelism 2] [--backend heap|rocksdb]
 *     [--checkpoint-ms MS --state-dir DIR]
 * </pre>
 */
public class WindowJob {

    public static void main(String[] args) throws Exception {
        String window = null;
        long delay = 0;
        List<String> rest = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--window" -> window = args[++i];
                case "--delay" -> delay = Long.parseLong(args[++i]);
                default -> rest.add(args[i]);
            }
        }
        if (window == null) {
            throw new IllegalArgumentException(
                    "--window tumbling:<size ms> or sliding:<size ms>:<slide ms> is required");
        }
        String[] w = window.split(":");
        WindowAssigner<Object, TimeWindow> assigner =
                switch (w[0]) {
                    case "tumbling" -> TumblingEventTimeWindows.of(Duration.ofMillis(Long.parseLong(w[1])));
                    case "sliding" -> SlidingEventTimeWindows.of(
                            Duration.ofMillis(Long.parseLong(w[1])), Duration.ofMillis(Long.parseLong(w[2])));
                    default -> throw new IllegalArgumentException("unknown window " + window);
                };

        BenchJob.Options options = BenchJob.Options.parse("WindowJob", rest.toArray(new String[0]));
        StreamExecutionEnvironment env = BenchJob.environment(options);
        FileSource<String> source =
                FileSource.forRecordStreamFormat(new TextLineInputFormat(), new Path(options.input)).build();
        DataStream<Tuple2<String, Long>> events =
                env.fromSource(source, WatermarkStrategy.noWatermarks(), "events")
                        .flatMap((String line, Collector<Tuple2<String, Long>> out) -> {
                            int comma = line.indexOf(',');
                            if (comma > 0) {
                                out.collect(Tuple2.of(line.substring(0, comma), Long.parseLong(line.substring(comma + 1).trim())));
                            }
                        })
                        .returns(org.apache.flink.api.common.typeinfo.Types.TUPLE(
                                org.apache.flink.api.common.typeinfo.Types.STRING,
                                org.apache.flink.api.common.typeinfo.Types.LONG))
                        .name("parse")
                        .assignTimestampsAndWatermarks(
                                WatermarkStrategy.<Tuple2<String, Long>>forBoundedOutOfOrderness(Duration.ofMillis(delay))
                                        .withTimestampAssigner((e, previous) -> e.f1))
                        .name("event-time");
        DataStream<String> counts =
                events.keyBy(e -> e.f0)
                        .window(assigner)
                        .aggregate(new Count(), new Format())
                        .name("window");
        BenchJob.writeLines(counts, options);
        BenchJob.execute(env, "WindowJob");
    }

    /** Counts a window's records. */
    static final class Count implements AggregateFunction<Tuple2<String, Long>, Long, Long> {
        @Override
        public Long createAccumulator() {
            return 0L;
        }

        @Override
        public Long add(Tuple2<String, Long> value, Long acc) {
            return acc + 1;
        }

        @Override
        public Long getResult(Long acc) {
            return acc;
        }

        @Override
        public Long merge(Long a, Long b) {
            return a + b;
        }
    }

    /** Writes a window's count as weir writes its window results. */
    static final class Format extends ProcessWindowFunction<Long, String, String, TimeWindow> {
        @Override
        public void process(String key, Context ctx, Iterable<Long> counts, Collector<String> out) {
            long n = counts.iterator().next();
            out.collect(key + "\t" + ctx.window().getStart() + "," + ctx.window().getEnd() + "," + n);
        }
    }
}
