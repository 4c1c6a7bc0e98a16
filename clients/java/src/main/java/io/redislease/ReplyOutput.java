package io.redislease;

import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.output.CommandOutput;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;

/**
 * The reply of one module command as plain Java values: {@code Long} (integer), {@code String}
 * (bulk/simple string), {@code null} (nil, RESP2 or RESP3), {@code List} (array) or
 * {@link MapReply} (RESP3 map: alternating keys and values). Error replies complete the command
 * exceptionally (Lettuce's RedisCommandExecutionException with the error line).
 */
final class ReplyOutput extends CommandOutput<String, String, Object> {
    /** A RESP3 map, flattened as key, value, key, value... */
    static final class MapReply extends ArrayList<Object> {
        private static final long serialVersionUID = 1L;

        Object get(String key) {
            for (int i = 0; i + 1 < size(); i += 2) {
                if (key.equals(get(i))) {
                    return get(i + 1);
                }
            }
            return null;
        }
    }

    private final Deque<List<Object>> stack = new ArrayDeque<>();

    ReplyOutput() {
        super(StringCodec.UTF8, null);
    }

    private void put(Object v) {
        if (stack.isEmpty()) {
            output = v;
        } else {
            stack.peek().add(v);
        }
    }

    @Override
    public void set(ByteBuffer bytes) {
        put(bytes == null ? null : decodeString(bytes));
    }

    @Override
    public void setSingle(ByteBuffer bytes) {
        put(bytes == null ? null : decodeString(bytes));
    }

    @Override
    public void setBigNumber(ByteBuffer bytes) {
        put(bytes == null ? null : decodeString(bytes));
    }

    @Override
    public void set(long integer) {
        put(integer);
    }

    @Override
    public void set(double number) {
        put(number);
    }

    @Override
    public void set(boolean value) {
        put(value);
    }

    @Override
    public void multi(int count) {
        List<Object> l = new ArrayList<>(Math.max(count, 0));
        put(l);
        stack.push(l);
    }

    @Override
    public void multiMap(int count) {
        MapReply m = new MapReply();
        put(m);
        stack.push(m);
    }

    /** Called after each element with the decoder's depth: close the containers that ended. */
    @Override
    public void complete(int depth) {
        while (stack.size() > Math.max(depth, 0)) {
            stack.pop();
        }
    }
}
