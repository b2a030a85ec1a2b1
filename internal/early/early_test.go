package early

import "testing"

func TestQuietCLocale(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want string // LANGUAGE after
	}{
		{map[string]string{"LANG": "C.UTF-8"}, "en"},
		{map[string]string{"LC_ALL": "POSIX.utf8"}, "en"},
		{map[string]string{"LC_ALL": "C.UTF-8", "LANG": "de_DE.UTF-8"}, "en"},
		{map[string]string{"LC_ALL": "de_DE.UTF-8", "LANG": "C.UTF-8"}, ""}, // LC_ALL wins
		{map[string]string{"LANG": "C"}, ""},                                // Fyne reads plain C itself
		{map[string]string{"LANG": "fr_FR.UTF-8"}, ""},
		{map[string]string{"LANG": "C.UTF-8", "LANGUAGE": "fr"}, "fr"},
		{map[string]string{}, ""},
	}
	for _, tt := range tests {
		env := map[string]string{}
		for k, v := range tt.env {
			env[k] = v
		}
		quietCLocale(func(k string) string { return env[k] }, func(k, v string) error { env[k] = v; return nil })
		if env["LANGUAGE"] != tt.want {
			t.Errorf("%v: LANGUAGE %q, want %q", tt.env, env["LANGUAGE"], tt.want)
		}
	}
}
