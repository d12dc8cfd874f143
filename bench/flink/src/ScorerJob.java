import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.StateTtlConfig;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

/**
 * Account scorer: per account, alerts on an amount far above the recent ones and on a large
 * amount at a merchant the account has not paid before, and writes a summary of the account
 * when it has been quiet for an hour of event time (here: at the end of input, as there are no
 * watermarks before it).
 *
 * <pre>
 * java -cp CLASSPATH ScorerJob --input DIR --output DIR [--parallelism 2]
 *     [--backend heap|rocksdb] [--checkpoint-ms MS --state-dir DIR]
 * </pre>
 */
public class ScorerJob {

    public static void main(String[] args) throws Exception {
        BenchJob.run("ScorerJob", args, new Score(), "score");
    }

    /** Scores each account's transactions; emits alert and summary lines. */
    static final class Score extends KeyedProcessFunction<String, Transaction, String> {

        /** Amounts kept to compute the recent mean. */
        private static final int RECENT = 5;

        /** Fewest recent amounts needed before alerting on a high one. */
        private static final int MIN_RECENT = 3;

        /** A new-merchant payment at least this large (cents) is alerted on. */
        private static final long LARGE = 50_000;

        /** Event time an account must be quiet before its summary, ms. */
        private static final long QUIET_MS = 3_600_000;

        /** Merchant -> number of payments to it. */
        private transient MapState<String, Long> merchants;

        /** The last {@link #RECENT} amounts, oldest first. */
        private transient ListState<Long> recent;

        /** Number of transactions. */
        private transient ValueState<Long> count;

        /** Sum of the amounts, cents. */
        private transient ValueState<Long> total;

        /** Event time of the latest transaction; its quiet timer is at this + QUIET_MS. */
        private transient ValueState<Long> lastSeen;

        @Override
        public void open(OpenContext openContext) {
            merchants =
                    getRuntimeContext()
                            .getMapState(new MapStateDescriptor<>("merchants", Types.STRING, Types.LONG));
            recent = getRuntimeContext().getListState(new ListStateDescriptor<>("recent", Types.LONG));
            count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
            total = getRuntimeContext().getState(new ValueStateDescriptor<>("total", Types.LONG));

            ValueStateDescriptor<Long> lastSeenDescriptor =
                    new ValueStateDescriptor<>("last_seen", Types.LONG);
            lastSeenDescriptor.enableTimeToLive(
                    StateTtlConfig.newBuilder(Duration.ofHours(1))
                            .useProcessingTime()
                            .updateTtlOnCreateAndWrite()
                            .neverReturnExpired()
                            .build());
            lastSeen = getRuntimeContext().getState(lastSeenDescriptor);
        }

        @Override
        public void processElement(Transaction t, Context ctx, Collector<String> out) throws Exception {
            Long seen = merchants.get(t.merchant);
            boolean known = !merchants.isEmpty();

            List<Long> amounts = new ArrayList<>(RECENT + 1);
            Iterable<Long> stored = recent.get();
            if (stored != null) {
                stored.forEach(amounts::add);
            }
            if (amounts.size() >= MIN_RECENT) {
                long sum = 0;
                for (long a : amounts) {
                    sum += a;
                }
                long mean = sum / amounts.size();
                if (t.cents > 3 * mean) {
                    out.collect("ALERT high " + t.account + " " + t.cents + " mean=" + mean);
                }
            }
            if (seen == null && known && t.cents >= LARGE) {
                out.collect("ALERT new-merchant " + t.account + " " + t.merchant + " " + t.cents);
            }
            merchants.put(t.merchant, (seen == null ? 0 : seen) + 1);

            amounts.add(t.cents);
            if (amounts.size() > RECENT) {
                while (amounts.size() > RECENT) {
                    amounts.remove(0); // oldest first
                }
                recent.update(amounts);
            } else {
                recent.add(t.cents);
            }

            Long n = count.value();
            count.update((n == null ? 0 : n) + 1);
            Long sum = total.value();
            total.update((sum == null ? 0 : sum) + t.cents);

            // One quiet timer per account: move it to an hour after this transaction.
            Long previous = lastSeen.value();
            if (previous != null) {
                ctx.timerService().deleteEventTimeTimer(previous + QUIET_MS);
            }
            lastSeen.update(t.timestamp);
            ctx.timerService().registerEventTimeTimer(t.timestamp + QUIET_MS);
        }

        @Override
        public void onTimer(long timestamp, OnTimerContext ctx, Collector<String> out) throws Exception {
            Long n = count.value();
            Long sum = total.value();
            int distinct = 0;
            for (String ignored : merchants.keys()) {
                distinct++;
            }
            out.collect(
                    "SUMMARY "
                            + ctx.getCurrentKey()
                            + " count="
                            + (n == null ? 0 : n)
                            + " total="
                            + (sum == null ? 0 : sum)
                            + " merchants="
                            + distinct);
        }
    }
}
