package lease

import (
	"os"
	"strings"
	"testing"
)

// The README's example is ExampleNewElector (example_test.go), which go vet and go test
// compile: the body of the README's func main must be that function's body, line for line.
func TestReadmeExampleIsTheExample(t *testing.T) {
	body := func(path, open string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		i := strings.Index(s, open)
		if i < 0 {
			t.Fatalf("%s has no %q", path, open)
		}
		s = s[i+len(open):]
		j := strings.Index(s, "\n}\n")
		if j < 0 {
			t.Fatalf("%s: %q has no end", path, open)
		}
		return s[:j]
	}
	readme, example := body("README.md", "func main() {\n"), body("example_test.go", "func ExampleNewElector() {\n")
	if readme != example {
		t.Fatalf("README's example differs from ExampleNewElector:\nREADME:\n%s\nexample_test.go:\n%s", readme, example)
	}
}
