package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/anishathalye/porcupine"
)

func check(t *testing.T, history string) porcupine.CheckResult {
	t.Helper()
	path := filepath.Join(t.TempDir(), "h.jsonl")
	if err := os.WriteFile(path, []byte(history), 0o644); err != nil {
		t.Fatal(err)
	}
	ops, _, err := readHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	res, _ := porcupine.CheckOperationsVerbose(model, ops, 0)
	return res
}

func TestVerdicts(t *testing.T) {
	const a, b = `{"client":0,"op":"set","key":"k","value":"a","call":0,"return":10}` + "\n",
		`{"client":0,"op":"set","key":"k","value":"b","call":20,"return":30}` + "\n"
	// "b" timed out: it may land after the first read, or never.
	const unknownB = a + `{"client":0,"op":"set","key":"k","value":"b","call":20,"return":null}
{"client":1,"op":"get","key":"k","found":true,"value":"a","call":50,"return":60}
{"client":1,"op":"get","key":"k","found":true,"value":"b","call":70,"return":80}
`
	cases := []struct {
		name, history string
		want          porcupine.CheckResult
	}{
		{"a concurrent read may see either value", a + b +
			`{"client":1,"op":"get","key":"k","found":true,"value":"a","call":15,"return":25}`, porcupine.Ok},
		{"a read after an acknowledged write cannot miss it", a + b +
			`{"client":1,"op":"get","key":"k","found":true,"value":"a","call":31,"return":40}`, porcupine.Illegal},
		{"an unknown write may take effect late", unknownB, porcupine.Ok},
		{"an unknown write once seen stays seen", unknownB +
			`{"client":1,"op":"get","key":"k","found":true,"value":"a","call":90,"return":95}`, porcupine.Illegal},
		{"a miss before any write and after a delete", `{"client":0,"op":"get","key":"k","found":false,"call":0,"return":5}` +
			"\n" + a + `{"client":0,"op":"delete","key":"k","call":30,"return":40}
{"client":1,"op":"get","key":"k","found":false,"call":50,"return":60}`, porcupine.Ok},
		{"keys are independent registers", a +
			`{"client":1,"op":"get","key":"other","found":false,"call":50,"return":60}`, porcupine.Ok},
	}
	for _, c := range cases {
		if got := check(t, c.history); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestBadLineNamesFileAndLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	os.WriteFile(path, []byte("{\"op\":\"get\",\"key\":\"k\",\"call\":1,\"return\":2}\n{\"op\":\"cas\",\"call\":1}\n"), 0o644)
	_, _, err := readHistory(path)
	if err == nil || err.Error() != path+`:2: unknown op "cas" (get, set or delete)` {
		t.Fatalf("got %v", err)
	}
}

// FuzzReadHistory: any file is either refused with an error or read into
// a history the checker can take (go test -fuzz=FuzzReadHistory).
func FuzzReadHistory(f *testing.F) {
	f.Add([]byte(`{"client":0,"op":"set","key":"k","value":"a","call":0,"return":10}` + "\n"))
	f.Add([]byte(`{"client":1,"op":"get","key":"k","found":true,"value":"a","call":5,"return":null}` + "\n"))
	f.Add([]byte(`{"op":"delete","key":"k","call":3,"return":2}` + "\n\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "h.jsonl")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		ops, _, err := readHistory(path)
		if err != nil {
			return
		}
		if len(ops) > 8 {
			ops = ops[:8] // the search is exponential; the reader is the target
		}
		porcupine.CheckOperationsVerbose(model, ops, 0)
	})
}
