// This file holds a conversation's settings form: its system prompt, its
// sampling and whether it replies as JSON (with an optional schema).

package chat

import (
	"fmt"
	"strconv"
	"strings"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/store"
	"kvscope/engine/constrain"
)

// settingsForm edits the shown conversation's system prompt, sampling and
// reply format.
type settingsForm struct {
	p       *Pane
	root    fyne.CanvasObject
	system  *widget.Entry
	temp    *widget.Slider
	topP    *widget.Slider
	minP    *widget.Slider
	repeat  *widget.Slider
	topK    *widget.Entry
	maxTok  *widget.Entry
	seed    *widget.Entry
	asJSON  *widget.Check
	schema  *widget.Entry
	values  map[*widget.Slider]*widget.Label
	problem *widget.Label // a number field's
	badJSON *widget.Label // the schema's
	loading bool          // show is filling the widgets: do not write back
}

func newSettingsForm(p *Pane) *settingsForm {
	f := &settingsForm{p: p, values: map[*widget.Slider]*widget.Label{}}
	f.system = widget.NewMultiLineEntry()
	f.system.SetPlaceHolder("System prompt: the system message (in plain completion, text put before the conversation)")
	f.system.SetMinRowsVisible(2)
	f.system.Wrapping = fyne.TextWrapWord
	f.system.OnChanged = func(s string) { f.write(func(c *store.Conversation) { c.System = s }) }

	slider := func(lo, hi, step float64, set func(c *store.Conversation, v float32)) *widget.Slider {
		s := widget.NewSlider(lo, hi)
		s.Step = step
		lab := widget.NewLabel("")
		f.values[s] = lab
		s.OnChanged = func(v float64) {
			lab.SetText(strconv.FormatFloat(v, 'f', 2, 64))
			f.write(func(c *store.Conversation) { set(c, float32(v)) })
		}
		return s
	}
	f.temp = slider(0, 2, 0.05, func(c *store.Conversation, v float32) { c.Sampling.Temperature = v })
	f.topP = slider(0.05, 1, 0.05, func(c *store.Conversation, v float32) { c.Sampling.TopP = v })
	f.minP = slider(0, 0.5, 0.01, func(c *store.Conversation, v float32) { c.Sampling.MinP = v })
	f.repeat = slider(1, 2, 0.05, func(c *store.Conversation, v float32) { c.Sampling.RepeatPenalty = v })
	f.problem = widget.NewLabel("")
	f.problem.Importance = widget.DangerImportance
	f.problem.Hide()
	f.badJSON = widget.NewLabel("")
	f.badJSON.Importance = widget.DangerImportance
	f.badJSON.Wrapping = fyne.TextWrapWord
	f.badJSON.Hide()
	number := func(name string, set func(c *store.Conversation, n int64)) *widget.Entry {
		e := widget.NewEntry()
		e.OnChanged = func(s string) {
			if f.loading {
				return
			}
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 {
				f.problem.SetText(fmt.Sprintf("%s must be a whole number, 0 or more; %q is not (the last valid value stays in use)", name, s))
				f.problem.Show()
				return
			}
			f.problem.Hide()
			f.write(func(c *store.Conversation) { set(c, n) })
		}
		return e
	}
	f.topK = number("Top-k", func(c *store.Conversation, n int64) { c.Sampling.TopK = int(n) })
	f.maxTok = number("Max tokens", func(c *store.Conversation, n int64) { c.Sampling.MaxTokens = int(n) })
	f.seed = number("Seed", func(c *store.Conversation, n int64) { c.Sampling.Seed = uint64(n) })

	row := func(s *widget.Slider) fyne.CanvasObject {
		return container.NewBorder(nil, nil, nil, f.values[s], s)
	}
	form := widget.NewForm(
		widget.NewFormItem("Temperature", row(f.temp)),
		widget.NewFormItem("Top-p", row(f.topP)),
		widget.NewFormItem("Min-p", row(f.minP)),
		widget.NewFormItem("Repeat penalty", row(f.repeat)),
	)
	f.seed.SetPlaceHolder("0: random")
	f.schema = widget.NewMultiLineEntry()
	f.schema.SetPlaceHolder("JSON Schema of the reply (optional: empty means any JSON object)")
	f.schema.SetMinRowsVisible(2)
	f.schema.OnChanged = func(s string) {
		if f.loading {
			return
		}
		f.checkSchema(s)
		f.write(func(c *store.Conversation) { c.JSONSchema = s }) // kept as typed, even while invalid
	}
	f.asJSON = widget.NewCheck("Reply as JSON", func(on bool) {
		f.write(func(c *store.Conversation) { c.JSON = on })
	})
	labeled := func(name string, e *widget.Entry) fyne.CanvasObject {
		return container.NewBorder(nil, nil, widget.NewLabel(name), nil, e)
	}
	nums := container.NewGridWithColumns(3, labeled("Top-k", f.topK), labeled("Max tokens", f.maxTok), labeled("Seed", f.seed))
	f.root = container.NewVBox(f.system, form, nums, f.problem, f.asJSON, f.schema, f.badJSON)
	return f
}

// write applies a change to the shown conversation, unless show is filling
// the widgets.
func (f *settingsForm) write(change func(c *store.Conversation)) {
	if f.loading {
		return
	}
	f.p.edit(f.p.data.Selected, change)
}

// show fills the widgets from c.
func (f *settingsForm) show(c *store.Conversation) {
	f.loading = true
	defer func() { f.loading = false }()
	s := c.Sampling
	f.system.SetText(c.System)
	f.temp.SetValue(float64(s.Temperature))
	f.topP.SetValue(float64(s.TopP))
	f.minP.SetValue(float64(s.MinP))
	f.repeat.SetValue(float64(s.RepeatPenalty))
	for sl, lab := range f.values {
		lab.SetText(strconv.FormatFloat(sl.Value, 'f', 2, 64))
	}
	f.topK.SetText(strconv.Itoa(s.TopK))
	f.maxTok.SetText(strconv.Itoa(s.MaxTokens))
	f.seed.SetText(strconv.FormatUint(s.Seed, 10))
	f.asJSON.SetChecked(c.JSON)
	f.schema.SetText(c.JSONSchema)
	f.problem.Hide()
	f.checkSchema(c.JSONSchema)
}

// checkSchema shows why the schema text cannot constrain a reply, in a
// label of its own: a number field's problem neither hides it nor is
// hidden by it.
func (f *settingsForm) checkSchema(s string) {
	if _, err := replyConstraint(s); err != nil {
		f.badJSON.SetText(fmt.Sprintf("The reply's schema: %v (a JSON reply is refused until it is mended)", err))
		f.badJSON.Show()
		return
	}
	f.badJSON.Hide()
}

// replyConstraint is the constraint of a JSON reply: any object, or
// schema's JSON.
func replyConstraint(schema string) (*constrain.Grammar, error) {
	if strings.TrimSpace(schema) == "" {
		return constrain.JSON(true), nil
	}
	return constrain.Schema([]byte(schema))
}
