/**
 * One parsed input line {@code account,merchant,amount,timestamp}: the amount in cents, the
 * timestamp in Unix milliseconds (used as event time).
 *
 * <p>A Flink POJO (public class, public fields, public no-argument constructor), so Flink
 * serializes it with its POJO serializer rather than Kryo.
 */
public class Transaction {

    /** The key: the account the transaction belongs to. Never empty. */
    public String account;

    /** The merchant paid. Never empty. */
    public String merchant;

    /** The amount in cents. */
    public long cents;

    /** Event time, Unix milliseconds. */
    public long timestamp;

    /** For Flink's POJO serializer. */
    public Transaction() {}

    public Transaction(String account, String merchant, long cents, long timestamp) {
        this.account = account;
        this.merchant = merchant;
        this.cents = cents;
        this.timestamp = timestamp;
    }

    /**
     * Parses one line, or returns {@code null} when it is malformed.
     *
     * <p>A line parses when it has exactly four comma-separated fields, a non-empty account and
     * merchant, an amount {@code <units>.<two digits>} and a timestamp that fits a signed 64-bit
     * integer. The numbers follow Rust's {@code u64}/{@code i64} parsing (as the system this job
     * is compared with does): ASCII digits only, an optional leading {@code +} (and {@code -} for
     * the timestamp), no whitespace, no overflow.
     */
    public static Transaction parse(String line) {
        // Find the three separators by hand: String.split drops trailing empty fields and
        // takes a regex, neither of which we want on the hot path.
        int c1 = line.indexOf(',');
        if (c1 < 0) {
            return null;
        }
        int c2 = line.indexOf(',', c1 + 1);
        if (c2 < 0) {
            return null;
        }
        int c3 = line.indexOf(',', c2 + 1);
        if (c3 < 0 || line.indexOf(',', c3 + 1) >= 0) {
            return null;
        }
        if (c1 == 0 || c2 == c1 + 1) {
            return null; // empty account or merchant
        }

        // Amount: "<units>.<cents>" where the cents part is exactly two characters long.
        int dot = line.indexOf('.', c2 + 1);
        if (dot < 0 || dot > c3 || c3 - dot - 1 != 2) {
            return null;
        }
        long units = parseUnsigned(line, c2 + 1, dot);
        long fraction = parseUnsigned(line, dot + 1, c3);
        if (units < 0 || fraction < 0 || units > (Long.MAX_VALUE - fraction) / 100) {
            return null;
        }

        // Timestamp: any i64.
        long timestamp;
        try {
            timestamp = parseSigned(line, c3 + 1, line.length());
        } catch (NumberFormatException e) {
            return null;
        }
        return new Transaction(
                line.substring(0, c1), line.substring(c1 + 1, c2), units * 100 + fraction, timestamp);
    }

    /**
     * The non-negative number in {@code s[from, to)} (an optional {@code +}, then one or more
     * ASCII digits), or -1 when there is none or it overflows a {@code long}.
     */
    private static long parseUnsigned(String s, int from, int to) {
        if (from < to && s.charAt(from) == '+') {
            from++;
        }
        if (from >= to) {
            return -1;
        }
        long value = 0;
        for (int i = from; i < to; i++) {
            int digit = s.charAt(i) - '0';
            if (digit < 0 || digit > 9 || value > (Long.MAX_VALUE - digit) / 10) {
                return -1;
            }
            value = value * 10 + digit;
        }
        return value;
    }

    /**
     * The signed number in {@code s[from, to)}: an optional sign, then one or more ASCII digits.
     *
     * @throws NumberFormatException if there is none or it overflows a {@code long}
     */
    private static long parseSigned(String s, int from, int to) {
        // Long.parseLong would also accept non-ASCII digits; check for ASCII first.
        for (int i = from; i < to; i++) {
            char ch = s.charAt(i);
            boolean sign = i == from && (ch == '+' || ch == '-');
            if (!sign && (ch < '0' || ch > '9')) {
                throw new NumberFormatException("not a number: " + s.substring(from, to));
            }
        }
        return Long.parseLong(s, from, to, 10);
    }

    @Override
    public String toString() {
        return account + "," + merchant + "," + cents + "," + timestamp;
    }
}
