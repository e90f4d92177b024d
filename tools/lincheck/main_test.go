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

func TestConcurrentReadMaySeeEitherValue(t *testing.T) {
	h := `{"client":0,"op":"set","key":"k","value":"a","call":0,"return":10}
{"client":0,"op":"set","key":"k","value":"b","call":20,"return":30}
{"client":1,"op":"get","key":"k","found":true,"value":"a","call":15,"return":25}
`
	if got := check(t, h); got != porcupine.Ok {
		t.Fatalf("got %v", got)
	}
}

func TestStaleReadIsFlagged(t *testing.T) {
	// The read starts after "b" was acknowledged and still sees "a".
	h := `{"client":0,"op":"set","key":"k","value":"a","call":0,"return":10}
{"client":0,"op":"set","key":"k","value":"b","call":20,"return":30}
{"client":1,"op":"get","key":"k","found":true,"value":"a","call":31,"return":40}
`
	if got := check(t, h); got != porcupine.Illegal {
		t.Fatalf("got %v", got)
	}
}

func TestUnknownWriteMayTakeEffectLate(t *testing.T) {
	// "b" timed out: it may land after the first read, or never.
	h := `{"client":0,"op":"set","key":"k","value":"a","call":0,"return":10}
{"client":0,"op":"set","key":"k","value":"b","call":20,"return":null}
{"client":1,"op":"get","key":"k","found":true,"value":"a","call":50,"return":60}
{"client":1,"op":"get","key":"k","found":true,"value":"b","call":70,"return":80}
`
	if got := check(t, h); got != porcupine.Ok {
		t.Fatalf("got %v", got)
	}
	// ... but once seen, it cannot be unseen.
	h += `{"client":1,"op":"get","key":"k","found":true,"value":"a","call":90,"return":95}
`
	if got := check(t, h); got != porcupine.Illegal {
		t.Fatalf("got %v", got)
	}
}

func TestMissBeforeAnyWriteAndAfterDelete(t *testing.T) {
	h := `{"client":0,"op":"get","key":"k","found":false,"call":0,"return":5}
{"client":0,"op":"set","key":"k","value":"a","call":10,"return":20}
{"client":0,"op":"delete","key":"k","call":30,"return":40}
{"client":1,"op":"get","key":"k","found":false,"call":50,"return":60}
`
	if got := check(t, h); got != porcupine.Ok {
		t.Fatalf("got %v", got)
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
