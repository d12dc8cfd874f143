import java.util.ArrayList;
import java.util.List;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

/**
 * Top-N per account: keeps each account's three largest amounts, largest first, and emits
 * {@code <account> <a>,<b>,<c>} whenever a transaction changes them.
 *
 * <pre>
 * java -cp CLASSPATH TopNJob --input DIR --output DIR [--parallelism 2]
 *     [--backend heap|rocksdb] [--checkpoint-ms MS --state-dir DIR]
 * </pre>
 */
public class TopNJob {

    public static void main(String[] args) throws Exception {
        BenchJob.run("TopNJob", args, new TopN(), "top-n");
    }

    /** Keeps an account's largest amounts in a list state and emits them when they change. */
    static final class TopN extends KeyedProcessFunction<String, Transaction, String> {

        /** Amounts kept per account. */
        private static final int N = 3;

        /** The account's largest amounts (cents), largest first; at most {@link #N}. */
        private transient ListState<Long> top;

        @Override
        public void open(OpenContext openContext) {
            top = getRuntimeContext().getListState(new ListStateDescriptor<>("top", Types.LONG));
        }

        @Override
        public void processElement(Transaction t, Context ctx, Collector<String> out) throws Exception {
            List<Long> amounts = new ArrayList<>(N + 1);
            Iterable<Long> stored = top.get();
            if (stored != null) {
                stored.forEach(amounts::add);
            }
            if (amounts.size() == N && amounts.get(N - 1) >= t.cents) {
                return; // not among the largest
            }

            // Insert after every amount >= this one (ties: the newest goes last), keep N.
            int at = 0;
            while (at < amounts.size() && amounts.get(at) >= t.cents) {
                at++;
            }
            amounts.add(at, t.cents);
            if (amounts.size() > N) {
                amounts.remove(N);
            }
            top.update(amounts);

            StringBuilder line = new StringBuilder(t.account).append(' ');
            for (int i = 0; i < amounts.size(); i++) {
                if (i > 0) {
                    line.append(',');
                }
                line.append(amounts.get(i));
            }
            out.collect(line.toString());
        }
    }
}
