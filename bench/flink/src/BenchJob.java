import java.io.File;
import java.time.Duration;
import java.util.Locale;
import java.util.concurrent.TimeUnit;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.RuntimeExecutionMode;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.serialization.SimpleStringEncoder;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExecutionOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.connector.file.sink.FileSink;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.core.fs.Path;
import org.apache.flink.state.rocksdb.RocksDBOptions;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.ProcessFunction;
import org.apache.flink.streaming.api.functions.sink.filesystem.OutputFileConfig;
import org.apache.flink.streaming.api.functions.sink.filesystem.bucketassigners.BasePathBucketAssigner;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;
import org.apache.flink.util.OutputTag;

/**
 * What the benchmark jobs share: the command line, the environment (runtime mode, state
 * backend, checkpointing), the source and parse step, the file sink, and timing the run.
 *
 * <p>Each job is {@code source -> parse -> keyBy(account) -> <keyed function> -> sink}, all at
 * the same parallelism. The file source reads each input file as one split in one subtask, in
 * order, so the records of an account (which all sit in one file) reach the keyed function in
 * file order.
 */
final class BenchJob {

    /** Side output of the parse step for lines that do not parse; they are dropped. */
    static final OutputTag<String> MALFORMED = new OutputTag<String>("malformed") {};

    private BenchJob() {}

    /** The command line shared by the jobs. */
    static final class Options {
        String input;
        String output;
        int parallelism = 2;
        String backend = "heap";
        long checkpointMs = 0; // 0: checkpointing off
        boolean unaligned = false;
        String stateDir;

        static Options parse(String jobName, String[] args) {
            Options o = new Options();
            for (int i = 0; i < args.length; i++) {
                String flag = args[i];
                if (i + 1 >= args.length) {
                    throw usage(jobName, "missing value for " + flag);
                }
                String value = args[++i];
                switch (flag) {
                    case "--input" -> o.input = value;
                    case "--output" -> o.output = value;
                    case "--parallelism" -> o.parallelism = Integer.parseInt(value);
                    case "--backend" -> o.backend = value;
                    case "--checkpoint-ms" -> o.checkpointMs = Long.parseLong(value);
                    case "--unaligned" -> o.unaligned = Boolean.parseBoolean(value);
                    case "--state-dir" -> o.stateDir = value;
                    default -> throw usage(jobName, "unknown flag " + flag);
                }
            }
            if (o.input == null || o.output == null) {
                throw usage(jobName, "--input and --output are required");
            }
            if (!o.backend.equals("heap") && !o.backend.equals("rocksdb")) {
                throw usage(jobName, "--backend must be heap or rocksdb");
            }
            if (o.checkpointMs > 0 && o.stateDir == null) {
                throw usage(jobName, "--checkpoint-ms needs --state-dir");
            }
            File out = new File(o.output);
            String[] existing = out.list();
            if (existing != null && existing.length > 0) {
                throw usage(jobName, "output directory " + out + " is not empty");
            }
            return o;
        }

        private static IllegalArgumentException usage(String jobName, String problem) {
            return new IllegalArgumentException(
                    problem
                            + "\nusage: "
                            + jobName
                            + " --input <dir> --output <dir> [--parallelism 2]"
                            + " [--backend heap|rocksdb] [--checkpoint-ms <ms> --state-dir <dir>"
                            + " [--unaligned true]]");
        }
    }

    /**
     * A local (MiniCluster) environment in STREAMING mode with the state backend and, when
     * asked for, exactly-once checkpoints (aligned, or unaligned with {@code --unaligned true})
     * to {@code <state-dir>/checkpoints}.
     */
    static StreamExecutionEnvironment environment(Options o) {
        Configuration conf = new Configuration();
        conf.set(ExecutionOptions.RUNTIME_MODE, RuntimeExecutionMode.STREAMING);

        if (o.backend.equals("rocksdb")) {
            conf.set(StateBackendOptions.STATE_BACKEND, "rocksdb");
            conf.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, true);
            if (o.stateDir != null) {
                // RocksDB's working files; otherwise they go to java.io.tmpdir.
                conf.set(RocksDBOptions.LOCAL_DIRECTORIES, absolute(o.stateDir, "rocksdb"));
            }
        } else {
            conf.set(StateBackendOptions.STATE_BACKEND, "hashmap");
        }

        if (o.checkpointMs > 0) {
            conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofMillis(o.checkpointMs));
            conf.set(CheckpointingOptions.CHECKPOINTING_CONSISTENCY_MODE, CheckpointingMode.EXACTLY_ONCE);
            conf.set(CheckpointingOptions.ENABLE_UNALIGNED, o.unaligned);
            conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
            conf.set(
                    CheckpointingOptions.CHECKPOINTS_DIRECTORY,
                    new File(absolute(o.stateDir, "checkpoints")).toURI().toString());
        }

        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(o.parallelism);
        return env;
    }

    /**
     * The parsed transactions in {@code o.input} with their timestamps as event time.
     *
     * <p>There are no watermarks but the final one: the bounded source emits
     * {@code MAX_WATERMARK} when it ends, which fires every event-time timer still registered.
     * (The system these jobs are compared with has no watermarks yet, so its timers fire only at
     * the end of input; periodic watermarks would fire some of them earlier.)
     */
    static DataStream<Transaction> transactions(StreamExecutionEnvironment env, Options o) {
        FileSource<String> source =
                FileSource.forRecordStreamFormat(new TextLineInputFormat(), new Path(o.input)).build();

        SingleOutputStreamOperator<Transaction> parsed =
                env.fromSource(source, WatermarkStrategy.noWatermarks(), "transactions")
                        .process(new Parse())
                        .name("parse");

        // Malformed lines are set aside and dropped.
        parsed.getSideOutput(MALFORMED).sinkTo(new DiscardingSink<>()).name("malformed");

        return parsed.assignTimestampsAndWatermarks(
                        WatermarkStrategy.<Transaction>noWatermarks()
                                .withTimestampAssigner((t, previous) -> t.timestamp))
                .name("event-time");
    }

    /**
     * Runs job {@code jobName} with the command line {@code args}: source, parse, key by
     * account, {@code function} (named {@code name}), file sink.
     */
    static void run(
            String jobName,
            String[] args,
            KeyedProcessFunction<String, Transaction, String> function,
            String name)
            throws Exception {
        Options options = Options.parse(jobName, args);
        StreamExecutionEnvironment env = environment(options);
        DataStream<String> lines =
                transactions(env, options).keyBy(t -> t.account).process(function).name(name);
        writeLines(lines, options);
        execute(env, jobName);
    }

    /**
     * Writes {@code lines} as text files {@code part-<uuid>-<subtask>-<n>.txt} directly in
     * {@code o.output}. Files are committed at checkpoints and at the end of input; until then
     * they are hidden {@code .part-*.inprogress.*} files.
     */
    static void writeLines(DataStream<String> lines, Options o) {
        FileSink<String> sink =
                FileSink.forRowFormat(new Path(new File(o.output).getAbsolutePath()), new SimpleStringEncoder<String>("UTF-8"))
                        .withBucketAssigner(new BasePathBucketAssigner<>())
                        .withOutputFileConfig(
                                OutputFileConfig.builder().withPartPrefix("part").withPartSuffix(".txt").build())
                        .build();
        lines.sinkTo(sink).name("output");
    }

    /**
     * Runs the job and prints, last, its wall time from {@code env.execute()} to its return,
     * which includes starting and stopping the MiniCluster (a few seconds). The line before it
     * is Flink's own net runtime of the job, from running to finished.
     */
    static void execute(StreamExecutionEnvironment env, String jobName) throws Exception {
        long start = System.nanoTime();
        JobExecutionResult result = env.execute(jobName);
        double seconds = (System.nanoTime() - start) / 1e9;
        double net = result.getNetRuntime(TimeUnit.MILLISECONDS) / 1e3;
        System.out.println(String.format(Locale.ROOT, "net_runtime_seconds=%.3f", net));
        System.out.println(String.format(Locale.ROOT, "duration_seconds=%.3f", seconds));
    }

    private static String absolute(String dir, String child) {
        return new File(dir, child).getAbsolutePath();
    }

    /** Parses lines into transactions; lines that do not parse go to {@link #MALFORMED}. */
    static final class Parse extends ProcessFunction<String, Transaction> {
        @Override
        public void processElement(String line, Context ctx, Collector<Transaction> out) {
            Transaction t = Transaction.parse(line);
            if (t != null) {
                out.collect(t);
            } else {
                ctx.output(MALFORMED, line);
            }
        }
    }
}
