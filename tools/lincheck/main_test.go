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
		{"a NOT_FOUND delete after an acknowledged write is a lost write", a +
			`{"client":1,"op":"delete","key":"k","found":false,"call":20,"return":30}
{"client":1,"op":"get","key":"k","found":false,"call":40,"return":50}`, porcupine.Illegal},
		{"of two concurrent deletes one may find nothing", a +
			`{"client":1,"op":"delete","key":"k","found":true,"call":20,"return":30}
{"client":2,"op":"delete","key":"k","found":false,"call":22,"return":32}`, porcupine.Ok},
		{"a DELETED delete of an absent key is an anomaly",
			`{"client":1,"op":"delete","key":"k","found":true,"call":20,"return":30}`, porcupine.Illegal},
		{"a delete without its answer may have found either", a +
			`{"client":1,"op":"delete","key":"k","call":20,"return":30}
{"client":1,"op":"delete","key":"k","found":false,"call":40,"return":null}
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

// history joins lines into a history file's text.
func history(lines ...string) string {
	var s string
	for _, l := range lines {
		s += l + "\n"
	}
	return s
}

func TestNewOpVerdicts(t *testing.T) {
	const setA = `{"client":0,"op":"set","key":"k","value":"a","call":0,"return":10}`
	const set5 = `{"client":0,"op":"set","key":"k","value":"5","call":0,"return":10}`
	cases := []struct {
		name, history string
		want          porcupine.CheckResult
	}{
		// append
		{"an append extends the value", history(setA,
			`{"client":1,"op":"append","key":"k","value":"+b","outcome":"stored","call":20,"return":30}`,
			`{"client":2,"op":"get","key":"k","found":true,"value":"a+b","call":40,"return":50}`), porcupine.Ok},
		{"an acknowledged append cannot be missing", history(setA,
			`{"client":1,"op":"append","key":"k","value":"+b","outcome":"stored","call":20,"return":30}`,
			`{"client":2,"op":"get","key":"k","found":true,"value":"a","call":40,"return":50}`), porcupine.Illegal},
		{"an append to an absent key is not stored",
			history(`{"client":1,"op":"append","key":"k","value":"+b","outcome":"stored","call":20,"return":30}`), porcupine.Illegal},
		{"an append whose reply was lost may apply", history(setA,
			`{"client":1,"op":"append","key":"k","value":"+b","call":20,"return":null}`,
			`{"client":2,"op":"get","key":"k","found":true,"value":"a","call":40,"return":50}`,
			`{"client":2,"op":"get","key":"k","found":true,"value":"a+b","call":60,"return":70}`), porcupine.Ok},
		{"an append whose reply was lost applies once", history(setA,
			`{"client":1,"op":"append","key":"k","value":"+b","call":20,"return":null}`,
			`{"client":2,"op":"get","key":"k","found":true,"value":"a+b+b","call":60,"return":70}`), porcupine.Illegal},
		// incr / decr
		{"incr answers and stores the sum", history(set5,
			`{"client":1,"op":"incr","key":"k","delta":7,"outcome":"value","value":"12","call":20,"return":30}`,
			`{"client":2,"op":"get","key":"k","found":true,"value":"12","call":40,"return":50}`), porcupine.Ok},
		{"two increments cannot both answer the same number", history(set5,
			`{"client":1,"op":"incr","key":"k","delta":1,"outcome":"value","value":"6","call":20,"return":30}`,
			`{"client":2,"op":"incr","key":"k","delta":1,"outcome":"value","value":"6","call":21,"return":31}`), porcupine.Illegal},
		{"decr stops at zero and pads in place", history(`{"client":0,"op":"set","key":"k","value":"10","call":0,"return":10}`,
			`{"client":1,"op":"decr","key":"k","delta":15,"outcome":"value","value":"0","call":20,"return":30}`,
			`{"client":2,"op":"get","key":"k","found":true,"value":"0 ","call":40,"return":50}`), porcupine.Ok},
		{"incr of a word is non-numeric, not a number", history(setA,
			`{"client":1,"op":"incr","key":"k","delta":1,"outcome":"value","value":"1","call":20,"return":30}`), porcupine.Illegal},
		{"incr of a word answers non-numeric", history(setA,
			`{"client":1,"op":"incr","key":"k","delta":1,"outcome":"non_numeric","call":20,"return":30}`), porcupine.Ok},
		{"incr of an absent key is not found",
			history(`{"client":1,"op":"incr","key":"k","delta":1,"outcome":"not_found","call":20,"return":30}`), porcupine.Ok},
		{"an incr whose reply was lost may apply or not", history(set5,
			`{"client":1,"op":"incr","key":"k","delta":2,"call":20,"return":null}`,
			`{"client":2,"op":"incr","key":"k","delta":1,"outcome":"value","value":"8","call":40,"return":50}`), porcupine.Ok},
		{"an incr whose reply was lost adds its own delta", history(set5,
			`{"client":1,"op":"incr","key":"k","delta":2,"call":20,"return":null}`,
			`{"client":2,"op":"incr","key":"k","delta":1,"outcome":"value","value":"9","call":40,"return":50}`), porcupine.Illegal},
		// gets / cas
		{"cas with the token of the value read succeeds", history(setA,
			`{"client":1,"op":"gets","key":"k","found":true,"value":"a","cas":7,"call":20,"return":30}`,
			`{"client":1,"op":"cas","key":"k","value":"c","cas":7,"outcome":"stored","call":40,"return":50}`,
			`{"client":2,"op":"gets","key":"k","found":true,"value":"c","cas":9,"call":60,"return":70}`), porcupine.Ok},
		{"cas with a token a later write replaced cannot succeed", history(setA,
			`{"client":1,"op":"gets","key":"k","found":true,"value":"a","cas":7,"call":20,"return":30}`,
			`{"client":0,"op":"set","key":"k","value":"b","call":40,"return":50}`,
			`{"client":1,"op":"cas","key":"k","value":"c","cas":7,"outcome":"stored","call":60,"return":70}`), porcupine.Illegal},
		{"cas with the current token cannot answer exists", history(setA,
			`{"client":1,"op":"gets","key":"k","found":true,"value":"a","cas":7,"call":20,"return":30}`,
			`{"client":1,"op":"cas","key":"k","value":"c","cas":7,"outcome":"exists","call":40,"return":50}`), porcupine.Illegal},
		{"cas racing a set may answer exists", history(setA,
			`{"client":1,"op":"gets","key":"k","found":true,"value":"a","cas":7,"call":20,"return":30}`,
			`{"client":0,"op":"set","key":"k","value":"b","call":35,"return":45}`,
			`{"client":1,"op":"cas","key":"k","value":"c","cas":7,"outcome":"exists","call":40,"return":50}`), porcupine.Ok},
		{"a later write's token is larger", history(setA,
			`{"client":1,"op":"gets","key":"k","found":true,"value":"a","cas":7,"call":20,"return":30}`,
			`{"client":0,"op":"set","key":"k","value":"b","call":40,"return":50}`,
			`{"client":1,"op":"gets","key":"k","found":true,"value":"b","cas":6,"call":60,"return":70}`), porcupine.Illegal},
		{"one value has one token", history(setA,
			`{"client":1,"op":"gets","key":"k","found":true,"value":"a","cas":7,"call":20,"return":30}`,
			`{"client":2,"op":"gets","key":"k","found":true,"value":"a","cas":8,"call":40,"return":50}`), porcupine.Illegal},
		{"cas of an absent key is not found", history(`{"client":1,"op":"cas","key":"k","value":"c","cas":7,"outcome":"not_found","call":40,"return":50}`,
			`{"client":2,"op":"get","key":"k","found":false,"call":60,"return":70}`), porcupine.Ok},
		{"a cas whose reply was lost may apply", history(setA,
			`{"client":1,"op":"gets","key":"k","found":true,"value":"a","cas":7,"call":20,"return":30}`,
			`{"client":1,"op":"cas","key":"k","value":"c","cas":7,"call":40,"return":null}`,
			`{"client":2,"op":"get","key":"k","found":true,"value":"a","call":50,"return":60}`,
			`{"client":2,"op":"get","key":"k","found":true,"value":"c","call":70,"return":80}`), porcupine.Ok},
		{"a cas whose reply was lost cannot apply over a newer write", history(setA,
			`{"client":1,"op":"gets","key":"k","found":true,"value":"a","cas":7,"call":20,"return":30}`,
			`{"client":0,"op":"set","key":"k","value":"b","call":31,"return":35}`,
			`{"client":1,"op":"cas","key":"k","value":"c","cas":7,"call":40,"return":null}`,
			`{"client":2,"op":"get","key":"k","found":true,"value":"c","call":70,"return":80}`), porcupine.Illegal},
	}
	for _, c := range cases {
		if got := check(t, c.history); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestParseCounterIsStrtoull(t *testing.T) {
	for v, want := range map[string]int64{"12": 12, " 7 ": 7, "+3": 3, "9 x": 9, "5+1": -1, "": -1, "a": -1,
		"-0": 0, "-1": -1, "18446744073709551615": -1 << 63, "18446744073709551616": -1} {
		n, ok := parseCounter(v)
		switch {
		case want == -1 && ok:
			t.Errorf("%q: got %d, want refused", v, n)
		case want == -1<<63 && (!ok || n != 18446744073709551615):
			t.Errorf("%q: got %d %v, want the largest u64", v, n, ok)
		case want >= 0 && (!ok || n != uint64(want)):
			t.Errorf("%q: got %d %v, want %d", v, n, ok, want)
		}
	}
}

func TestBadLineNamesFileAndLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	os.WriteFile(path, []byte("{\"op\":\"get\",\"key\":\"k\",\"call\":1,\"return\":2}\n{\"op\":\"touch\",\"call\":1}\n"), 0o644)
	_, _, err := readHistory(path)
	if err == nil || err.Error() != path+`:2: unknown op "touch" (get, gets, set, delete, append, incr, decr or cas)` {
		t.Fatalf("got %v", err)
	}
}

// FuzzReadHistory: any file is either refused with an error or read into
// a history the checker can take (go test -fuzz=FuzzReadHistory).
func FuzzReadHistory(f *testing.F) {
	f.Add([]byte(`{"client":0,"op":"set","key":"k","value":"a","call":0,"return":10}` + "\n"))
	f.Add([]byte(`{"client":1,"op":"get","key":"k","found":true,"value":"a","call":5,"return":null}` + "\n"))
	f.Add([]byte(`{"op":"delete","key":"k","call":3,"return":2}` + "\n\n"))
	f.Add([]byte(`{"op":"incr","key":"k","delta":1,"outcome":"value","value":"3","call":1,"return":4}` + "\n" +
		`{"op":"cas","key":"k","value":"x","cas":9,"outcome":"exists","call":2,"return":null}` + "\n"))
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
