package io.redislease;

import io.lettuce.core.RedisURI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;

/**
 * The conformance elector's {@code redis+sentinel://} URLs (docs/conformance.md): under
 * {@code --topology sentinel} the harness hands every elector
 * {@code redis+sentinel://[[user]:password@]host:port[,host:port...]/master-name[/db]}, the
 * scheme of the Rust client (client/src/sentinel.rs), which Lettuce does not parse (its own is
 * {@code redis-sentinel://...#masterId}). This turns it into a Lettuce Sentinel
 * {@link RedisURI} (sentinels + master id), which {@link LeaderElector.Builder#redis(RedisURI)}
 * resolves to the primary at every (re)connect. Test code, as the elector: not in the jar.
 */
final class ConformanceSentinelUrl {
    static final String SCHEME = "redis+sentinel://";
    private static final Pattern PORT = Pattern.compile("\\d{1,5}");
    private static final Pattern DB = Pattern.compile("\\d{1,9}");

    private ConformanceSentinelUrl() {}

    /**
     * The Sentinel URI of a {@code redis+sentinel://} URL; {@code null} for a URL of any other
     * scheme (used as before). Credentials and db apply to the primary, as in the Rust client:
     * the Sentinels are asked without credentials.
     *
     * @throws IllegalArgumentException with a one-line message, for a malformed one
     */
    static RedisURI parse(String url) {
        if (!url.startsWith(SCHEME)) {
            return null;
        }
        String rest = url.substring(SCHEME.length());
        int slash = rest.indexOf('/');
        if (slash < 0) {
            throw new IllegalArgumentException("sentinel url needs /master-name after the hosts (" + SCHEME + "h:p,h:p/name)");
        }
        String authority = rest.substring(0, slash);
        String path = rest.substring(slash + 1);
        // The last '@': a password may itself contain '@' (as the Rust parser).
        int at = authority.lastIndexOf('@');
        String userinfo = at < 0 ? null : authority.substring(0, at);
        String hosts = at < 0 ? authority : authority.substring(at + 1);
        List<String> sentinelHosts = new ArrayList<>();
        List<Integer> sentinelPorts = new ArrayList<>();
        for (String h : hosts.split(",")) {
            if (h.isEmpty()) {
                continue;
            }
            int colon = h.lastIndexOf(':');
            if (colon < 0) {
                throw new IllegalArgumentException("sentinel address \"" + h + "\" needs host:port");
            }
            String portText = h.substring(colon + 1);
            if (!PORT.matcher(portText).matches() || Integer.parseInt(portText) > 65535) {
                throw new IllegalArgumentException("sentinel address \"" + h + "\": bad port");
            }
            // [::1]:26379: Lettuce wants the bare IPv6 address.
            String host = h.substring(0, colon).replaceFirst("^\\[(.*)\\]$", "$1");
            if (host.isEmpty()) {
                throw new IllegalArgumentException("sentinel address \"" + h + "\": empty host");
            }
            sentinelHosts.add(host);
            sentinelPorts.add(Integer.parseInt(portText));
        }
        if (sentinelHosts.isEmpty()) {
            throw new IllegalArgumentException("sentinel url names no sentinel");
        }
        String[] parts = path.replaceFirst("/+$", "").split("/", -1);
        String name = parts[0];
        if (name.isEmpty()) {
            throw new IllegalArgumentException("sentinel url needs a master name");
        }
        if (parts.length > 2) {
            throw new IllegalArgumentException("sentinel url: unexpected path after the db: \"" + path + "\"");
        }
        RedisURI.Builder b = RedisURI.Builder.sentinel(sentinelHosts.get(0), sentinelPorts.get(0), name);
        for (int i = 1; i < sentinelHosts.size(); i++) {
            b.withSentinel(sentinelHosts.get(i), sentinelPorts.get(i));
        }
        if (parts.length == 2 && !parts[1].isEmpty()) {
            if (!DB.matcher(parts[1]).matches()) {
                throw new IllegalArgumentException("sentinel url: bad db \"" + parts[1] + "\"");
            }
            b.withDatabase(Integer.parseInt(parts[1]));
        }
        if (userinfo != null) {
            // The scheme's form is [user]:password@; "name@" alone (a URL's user without a
            // password) would silently connect unauthenticated, so it is refused.
            int c = userinfo.indexOf(':');
            if (c < 0) {
                throw new IllegalArgumentException("sentinel url: credentials are [user]:password@ (no ':' before the '@')");
            }
            String user = decode(userinfo.substring(0, c));
            String password = decode(userinfo.substring(c + 1));
            if (user.isEmpty()) {
                b.withPassword(password.toCharArray());
            } else {
                b.withAuthentication(user, password.toCharArray());
            }
        }
        return b.build();
    }

    private static String decode(String s) {
        // URLDecoder turns '+' into a space (form encoding); a URL's userinfo keeps it.
        try {
            return URLDecoder.decode(s.replace("+", "%2B"), StandardCharsets.UTF_8);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("sentinel url: bad percent-encoding in the credentials");
        }
    }
}
