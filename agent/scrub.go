package agent

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// scrubFacts returns a result's facts with the task's sensitive values
// replaced by (sensitive) in every string anywhere in them (nested maps and
// lists, numbers written as text) and in every key: a program that echoes
// its request puts the value there as readily as in its output. Facts are
// first brought to their JSON form (what they are sent as), so a backend's
// typed values ([]string, structs) are scrubbed too. Facts that do not
// encode are returned as they are; the caller drops them.
func (t *task) scrubFacts(facts map[string]any) map[string]any {
	if len(t.secrets) == 0 || facts == nil {
		return facts
	}
	b, err := json.Marshal(facts)
	if err != nil {
		return facts
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var plain map[string]any
	if err := dec.Decode(&plain); err != nil {
		return facts
	}
	out, _ := t.scrubValue(plain).(map[string]any)
	return out
}

// scrubValue scrubs one decoded JSON value.
func (t *task) scrubValue(v any) any {
	switch v := v.(type) {
	case string:
		return t.scrub(v)
	case json.Number:
		if s := t.scrub(string(v)); s != string(v) {
			return s
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = t.scrubValue(e)
		}
		return v
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			sk := t.scrub(k)
			// A key that was or held a secret may now equal another key;
			// neither value is lost.
			for n := 2; sk != k; n++ {
				if _, taken := v[sk]; !taken {
					if _, taken = out[sk]; !taken {
						break
					}
				}
				sk = t.scrub(k) + "#" + strconv.Itoa(n)
			}
			out[sk] = t.scrubValue(e)
		}
		return out
	}
	return v
}
