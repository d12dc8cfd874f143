import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import java.util.Arrays;
import java.util.concurrent.ThreadLocalRandom;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.fs.Path;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
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
 * <p>With {@code --rate R --seconds S --keys K} the events are generated instead, {@code R} per
 * second for {@code S} seconds over keys {@code k0..k<K-1>} in turn, each timestamped with the
 * wall clock at its generation less a random delay of up to {@code --delay} ms; the results
 * are discarded and the job prints their event-time lag (the wall clock when a result
 * arrives less its timestamp, the window's last millisecond) as
 * {@code event_time_lag records=N p50=MS p99=MS max=MS}. {@code --input} is not read then.
 *
 * <pre>
 * java -cp CLASSPATH WindowJob --window tumbling:60000 | sliding:60000:10000 --delay MS
 *     (--input DIR | --rate R --seconds S --keys K) --output DIR [--parallelism 2]
 *     [--backend heap|rocksdb] [--checkpoint-ms MS --state-dir DIR]
 * </pre>
 */
public class WindowJob {

    public static void main(String[] args) throws Exception {
        String window = null;
        long delay = 0;
        long rate = 0;
        long seconds = 0;
        long keys = 0;
        List<String> rest = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--window" -> window = args[++i];
                case "--delay" -> delay = Long.parseLong(args[++i]);
                case "--rate" -> rate = Long.parseLong(args[++i]);
                case "--seconds" -> seconds = Long.parseLong(args[++i]);
                case "--keys" -> keys = Long.parseLong(args[++i]);
                default -> rest.add(args[i]);
            }
        }
        if (rate > 0) {
            rest.addAll(List.of("--input", "generated"));
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
        DataStream<Tuple2<String, Long>> events =
                rate > 0 ? generated(env, rate, seconds, keys, delay) : parsed(env, options.input);
        DataStream<String> counts =
                events.assignTimestampsAndWatermarks(
                                WatermarkStrategy.<Tuple2<String, Long>>forBoundedOutOfOrderness(Duration.ofMillis(delay))
                                        .withTimestampAssigner((e, previous) -> e.f1))
                        .name("event-time")
                        .keyBy(e -> e.f0)
                        .window(assigner)
                        .aggregate(new Count(), new Format())
                        .name("window");
        if (rate > 0) {
            counts.process(new Lag()).setParallelism(1).name("lag")
                    .sinkTo(new DiscardingSink<>()).setParallelism(1).name("discard");
        } else {
            BenchJob.writeLines(counts, options);
        }
        BenchJob.execute(env, "WindowJob");
    }

    /** {@code key,timestamp} lines of the files under {@code input}. */
    static DataStream<Tuple2<String, Long>> parsed(StreamExecutionEnvironment env, String input) {
        FileSource<String> source =
                FileSource.forRecordStreamFormat(new TextLineInputFormat(), new Path(input)).build();
        return env.fromSource(source, WatermarkStrategy.noWatermarks(), "events")
                .flatMap((String line, Collector<Tuple2<String, Long>> out) -> {
                    int comma = line.indexOf(',');
                    if (comma > 0) {
                        out.collect(Tuple2.of(line.substring(0, comma), Long.parseLong(line.substring(comma + 1).trim())));
                    }
                })
                .returns(Types.TUPLE(Types.STRING, Types.LONG))
                .name("parse");
    }

    /** {@code rate} events a second for {@code seconds}, timestamped with the clock less a delay. */
    static DataStream<Tuple2<String, Long>> generated(
            StreamExecutionEnvironment env, long rate, long seconds, long keys, long delay) {
        DataGeneratorSource<Tuple2<String, Long>> source = new DataGeneratorSource<>(
                index -> Tuple2.of(
                        "k" + (index % keys),
                        System.currentTimeMillis() - ThreadLocalRandom.current().nextLong(delay + 1)),
                rate * seconds,
                RateLimiterStrategy.perSecond(rate),
                Types.TUPLE(Types.STRING, Types.LONG));
        return env.fromSource(source, WatermarkStrategy.noWatermarks(), "events");
    }

    /** Collects the results' event-time lag and prints its percentiles at the end. */
    static final class Lag extends ProcessFunction<String, String> {
        private long[] lags = new long[1 << 16];
        private int n;

        @Override
        public void processElement(String result, Context ctx, Collector<String> out) {
            if (n == lags.length) {
                lags = Arrays.copyOf(lags, n * 2);
            }
            lags[n++] = Math.max(0, System.currentTimeMillis() - ctx.timestamp());
            out.collect(result);
        }

        @Override
        public void close() {
            Arrays.sort(lags, 0, n);
            if (n > 0) {
                System.out.printf(
                        "event_time_lag records=%d p50=%d p99=%d max=%d%n",
                        n, lags[(int) Math.ceil(n * 0.5) - 1], lags[(int) Math.ceil(n * 0.99) - 1], lags[n - 1]);
            }
        }
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
