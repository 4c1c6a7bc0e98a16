package io.redislease;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.IOException;
import java.lang.reflect.Modifier;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * The public API of the shipped package, class by class (issue 28): internal classes such as
 * {@code Decide}, {@code Transport}, {@code QuorumDecide}, {@code QuorumTransport} and {@code ReplyOutput} stay package-private, so users can
 * only depend on what is listed here. A new public class must be added here on purpose.
 */
class ApiTest {
    private static final Set<String> PUBLIC = Set.of("Candidate", "ElectorMetrics", "ErrorKind", "FencedException",
            "LeaderCallable", "LeaderContext", "LeaderElector", "LeaderListener", "LeadershipLostException", "LeaseFence",
            "LeaseInfo", "LeaseTiming", "MicrometerElectorMetrics", "StepDownReason");

    @Test
    void onlyTheListedTopLevelClassesArePublic() throws IOException, ClassNotFoundException {
        Path classes = Path.of(Candidate.class.getProtectionDomain().getCodeSource().getLocation().getPath());
        Set<String> seen = new TreeSet<>();
        try (Stream<Path> s = Files.list(classes.resolve("io/redislease"))) {
            for (Path p : (Iterable<Path>) s::iterator) {
                String f = p.getFileName().toString();
                if (!f.endsWith(".class") || f.contains("$")) {
                    continue;
                }
                String name = f.substring(0, f.length() - ".class".length());
                if (Modifier.isPublic(Class.forName("io.redislease." + name).getModifiers())) {
                    seen.add(name);
                }
            }
        }
        assertEquals(new TreeSet<>(PUBLIC), seen);
    }
}
