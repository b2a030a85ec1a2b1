#!/usr/bin/env python3
"""Writes whitespace.json: Jinja whitespace-control cases and Python jinja2's
renderings of them, which TestWhitespaceCases (whitespace_test.go) wants
kvscope to render exactly.

The tests read the JSON only: they need neither Python nor jinja2. Run this
again (python3 gen_whitespace.py, with jinja2 installed: pip install jinja2
or apt-get install python3-jinja2) after changing a case.

The environment is Hugging Face transformers' (trim_blocks and
lstrip_blocks on, keep_trailing_newline off); the renderings were made with
the jinja2 version recorded in the file. jinja2 3.1 strips any white space
(\s, as str.isspace has it) before a block tag under lstrip_blocks.
"""

import json
import random
import sys

import jinja2

# The conversation of llama.cpp's chat-template tests.
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant"},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi there"},
    {"role": "user", "content": "Who are you"},
    {"role": "assistant", "content": "   I am an assistant   "},
    {"role": "user", "content": "Another question"},
]

CONVERSATION = {"messages": MESSAGES, "add_generation_prompt": True}

# Hand-written cases: (name, template, context or None for none).
CASES = [
    # A trim marker takes all white space, newlines included, on its side.
    ("trim before a block beside a newline", "<|user|>\n  {%- if true %}Hello{% endif %}", None),
    ("trim after a block beside a newline", "{% if true -%}\n  Hello{% endif %}", None),
    ("trim before a variable beside a newline", "<|user|>\n {{- 'Hello' }}", None),
    ("trim after a variable beside a newline", "{{ 'a' -}}\n  \n b", None),
    ("trim on both sides of a comment", "a \n {#- c -#} \n b", None),
    ("trim marks on both sides of a block", "x \n\n{%- if true -%}\n\n y \n\n{%- endif -%}\n\n z", None),
    ("a trim stops at the next tag", "{{ 'a' -}}{{ '' }}  b", None),
    # trim_blocks: the first newline after a block tag or comment goes,
    # not the one after a variable, not a second one.
    ("trim_blocks takes one newline after a block", "{% if true %}\n\nb{% endif %}", None),
    ("trim_blocks leaves the newline after a variable", "{{ 'a' }}\nb", None),
    ("trim_blocks after a comment", "{# c #}\nb", None),
    ("trim_blocks only for a newline right after the tag", "{% if true %} \nb{% endif %}", None),
    ("plus after a block keeps its newline", "{% if true +%}\nb{% endif %}", None),
    ("trim_blocks after endfor in a loop", "{% for i in [1, 2] %}{{ i }}\n{% endfor %}\nend", None),
    # lstrip_blocks: white space from the start of a line to a block tag
    # goes, only when the tag is the first thing on its line.
    ("lstrip_blocks on a tag alone on its line", "a\n    {% if true %}\nb\n    {% endif %}\nc", None),
    ("lstrip_blocks not after text on the line", "a  {% if true %}b{% endif %}", None),
    ("lstrip_blocks not for a variable", "a\n    {{ 'b' }}", None),
    ("lstrip_blocks for a comment", "a\n    {# c #}\nb", None),
    ("plus before a block turns lstrip_blocks off", "a\n    {%+ if true %}b{% endif %}", None),
    ("plus before a comment turns lstrip_blocks off", "a\n  {#+ c #}b", None),
    ("lstrip_blocks at the template's start", "  \t{% if true %}b{% endif %}", None),
    ("lstrip_blocks after a tag that took the newline", "{% if true %}\n  {% if true %}b{% endif %}{% endif %}", None),
    ("lstrip_blocks not after a variable on the same line", "{{ 'a' }}  {% if true %}b{% endif %}", None),
    ("lstrip_blocks after a trim that took a newline", "{{ 'a' -}}\n  {% if true %}b{% endif %}", None),
    ("lstrip_blocks with an inline tag after an indented one", "  {% if true %}x {% if true %}y{% endif %}{% endif %}", None),
    ("lstrip_blocks of other white space", "a\n\u3000\x0b{% if true %}b{% endif %}", None),
    # White space as Python has it (str.isspace, re's \s).
    ("trim takes the separators U+001C to U+001F", "a\x1c\x1d\x1e\x1f{%- if true %}b{% endif %}", None),
    ("trim takes no-break and ideographic spaces", "{{ 'a' -}}\u00a0\u3000\u2028b", None),
    ("a zero-width space is not white space", "a\u200b{%- if true %}b{% endif %}", None),
    # Newlines: \r\n and \r become \n, and one final newline goes.
    ("CRLF line ends with trim_blocks", "{% if true %}\r\na\r\n{% endif %}\r\nb\r\n", None),
    ("a final newline goes, a second stays", "a\n\n", None),
    # Tags that hold closers: quotes and brackets hide them.
    ("closers in a string", "{{ '%}' ~ \"}}\" ~ '-}}' }}\n{% if '%}' %}y{% endif %}", None),
    ("nested dict literals", "{{ {'a': {'b': 'c'}}['a']['b'] }} {% set d = {'k': {'v': 1}} %}\n{{ d['k']['v'] -}}  !", None),
    # Raw blocks: the body is text, with the tags' whitespace control.
    ("raw block with lstrip and trim", "a\n  {% raw %}\n{{ x }}\n  {% endraw %}\nb", None),
    ("raw block with trim marks", "a  {%- raw -%}  {{ x }}  {%- endraw -%}  b", None),
    # Blocks that make text: macros, set blocks, call blocks, filters.
    ("macro body", "{% macro f(x) %}\n  <{{ x }}>\n{% endmacro %}\n{{ f(1) }}|{{ f(2) -}}\n|", None),
    ("macro body with trims", "{%- macro f(x) -%}\n  <{{ x }}>\n{%- endmacro -%}\n  {{ f(1) }}", None),
    ("set block", "{% set s %}\n  v\n{% endset %}[{{ s }}]", None),
    ("call block", "{% macro w() %}({{ caller() }}){% endmacro %}{% call w() %}\n  in\n{% endcall %}", None),
    ("filter block", "{% filter upper %}\n  a\n  {% if true %}b{% endif %}\n{% endfilter %}", None),
    # Loops with the conversation.
    ("ChatML with indented tags",
     "{% for m in messages %}\n    {% if m.role == 'user' %}\n<|im_start|>user\n{{ m.content }}<|im_end|>\n    {% else %}\n<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n    {% endif %}\n{% endfor %}\n{% if add_generation_prompt %}\n<|im_start|>assistant\n{% endif %}",
     CONVERSATION),
    # GLM family.  A GLM-4 style template with trim marks beside the
    # newlines that end its role markers.
    ("GLM-4 style, trim marks beside newlines",
     "[gMASK]<sop>\n{%- for m in messages %}\n    {%- if m.role == 'user' -%}\n<|user|>\n{{ m.content }}\n    {%- elif m.role == 'assistant' -%}\n<|assistant|>\n  {{- '\\n' + m.content | trim }}\n    {%- else -%}\n<|{{ m.role }}|>\n{# the content #}\n{{ m.content }}\n    {%- endif -%}\n{%- endfor -%}\n{% if add_generation_prompt %}\n<|assistant|>\n{% endif %}",
     CONVERSATION),
    # ChatGLM3 (as in llama.cpp's tests): it writes a space after the
    # newline, and jinja2 keeps it: "<|user|>\n Hello".
    ("ChatGLM3",
     "{% for message in messages %}{% if loop.first %}[gMASK]sop<|{{ message['role'] }}|>\n {{ message['content'] }}{% else %}<|{{ message['role'] }}|>\n {{ message['content'] }}{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}",
     CONVERSATION),
    # THUDM/glm-4-9b-chat's chat template, as llama.cpp's tests hold it
    # (the tool prompt cut short).
    ("THUDM/glm-4-9b-chat", r'''[gMASK]<sop>{% for item in messages %}{% if item['tools'] is defined %}<|system|>
你是一个名为 ChatGLM 的人工智能助手。你是基于智谱AI训练的语言模型 GLM-4 模型开发的，你的任务是针对用户的问题和要求提供适当的答复和支持。

# 可用工具{% set tools = item['tools'] %}{% for tool in tools %}{% if tool['type'] == 'function' %}

## {{ tool['function']['name'] }}

{{ tool['function'] | tojson(indent=4) }}
......{% endif %}{% endfor %}{% endif %}{% if item['content'] %}<|{{ item['role'] }}|>{{ item['metadata'] }}
{{ item['content'] }}{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}''', CONVERSATION),
    # zai-org/GLM-4.5-Air's chat template.
    ("zai-org/GLM-4.5-Air", r'''[gMASK]<sop>
{%- if tools -%}
<|system|>
# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{% for tool in tools %}
{{ tool | tojson(ensure_ascii=False) }}
{% endfor %}
</tools>

For each function call, output the function name and arguments within the following XML format:
<tool_call>{function-name}
<arg_key>{arg-key-1}</arg_key>
<arg_value>{arg-value-1}</arg_value>
<arg_key>{arg-key-2}</arg_key>
<arg_value>{arg-value-2}</arg_value>
...
</tool_call>{%- endif -%}
{%- macro visible_text(content) -%}
    {%- if content is string -%}
        {{- content }}
    {%- elif content is iterable and content is not mapping -%}
        {%- for item in content -%}
            {%- if item is mapping and item.type == 'text' -%}
                {{- item.text }}
            {%- elif item is string -%}
                {{- item }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{- content }}
    {%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(last_user_index=-1) %}
{%- for m in messages %}
    {%- if m.role == 'user' %}
        {% set ns.last_user_index = loop.index0 -%}
    {%- endif %}
{%- endfor %}
{% for m in messages %}
{%- if m.role == 'user' -%}<|user|>
{% set content = visible_text(m.content) %}{{ content }}
{{- '/nothink' if (enable_thinking is defined and not enable_thinking and not content.endswith("/nothink")) else '' -}}
{%- elif m.role == 'assistant' -%}
<|assistant|>
{%- set reasoning_content = '' %}
{%- set content = visible_text(m.content) %}
{%- if m.reasoning_content is string %}
    {%- set reasoning_content = m.reasoning_content %}
{%- else %}
    {%- if '</think>' in content %}
        {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
        {%- set content = content.split('</think>')[-1].lstrip('\n') %}
    {%- endif %}
{%- endif %}
{%- if loop.index0 > ns.last_user_index and reasoning_content -%}
{{ '\n<think>' + reasoning_content.strip() +  '</think>'}}
{%- else -%}
{{ '\n<think></think>' }}
{%- endif -%}
{%- if content.strip() -%}
{{ '\n' + content.strip() }}
{%- endif -%}
{% if m.tool_calls %}
{% for tc in m.tool_calls %}
{%- if tc.function %}
    {%- set tc = tc.function %}
{%- endif %}
{{ '\n<tool_call>' + tc.name }}
{% set _args = tc.arguments %}
{% for k, v in _args.items() %}
<arg_key>{{ k }}</arg_key>
<arg_value>{{ v | tojson(ensure_ascii=False) if v is not string else v }}</arg_value>
{% endfor %}
</tool_call>{% endfor %}
{% endif %}
{%- elif m.role == 'tool' -%}
{%- if m.content is string -%}
{%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
    {{- '<|observation|>' }}
{%- endif %}
{{- '\n<tool_response>\n' }}
{{- m.content }}
{{- '\n</tool_response>' }}
{%- else -%}
<|observation|>{% for tr in m.content %}

<tool_response>
{{ tr.output if tr.output is defined else tr }}
</tool_response>{% endfor -%}
{% endif -%}
{%- elif m.role == 'system' -%}
<|system|>
{{ visible_text(m.content) }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    <|assistant|>{{- '\n<think></think>' if (enable_thinking is defined and not enable_thinking) else '' -}}
{%- endif -%}''', CONVERSATION),
    # The GLM-Z1-0414 chat template.
    ("THUDM/GLM-Z1-0414", r'''[gMASK]<sop>
{%- if tools -%}
<|system|>
你是一个名为 ChatGLM 的人工智能助手。你是基于智谱 AI 公司训练的语言模型 GLM-4 模型开发的，你的任务是针对用户的问题和要求提供适当的答复和支持。

# 可用工具
{%- for tool in tools %}
    {%- set function = tool.function if tool.get("function") else tool %}

## {{ function.name }}

{{ function | tojson(indent=4, ensure_ascii=False) }}
在调用上述函数时，请使用 Json 格式表示调用的参数。
{%- endfor %}
{%- endif -%}

{%- for msg in messages %}
    {%- if msg.role == 'system' %}
<|system|>
{{ msg.content }}
    {%- endif %}
{%- endfor %}

{%- for message in messages if message.role != 'system' %}
    {%- set role = message['role'] %}
    {%- set content = message['content'] %}
    {%- set visible = content.split('</think>')[-1].strip() %}
    {%- set meta = message.get("metadata", "") %}

    {%- if role == 'user' %}
<|user|>
{{ visible }}
    {%- elif role == 'assistant' and not meta %}
<|assistant|>
{{ visible }}
    {%- elif role == 'assistant' and meta %}
<|assistant|>{{ meta }}
{{ visible }}
    {%- elif role == 'observation' %}
<|observation|>
{{ visible }}
    {%- endif %}
{%- endfor %}
{% if add_generation_prompt %}<|assistant|>
<think>{% endif %}''', CONVERSATION),
]


def fuzz_cases(seed, n):
    """n random templates of text, tags and marks, from a fixed seed."""
    rng = random.Random(seed)
    texts = ["a", " ", "  ", "\n", "\t", " \n ", "\n\n", "b\n", "\n  ", "  \n",
             "\r\n", "\u00a0", "\x0b", "\x1c", "\u3000"]
    values = [" 'v' ", " {'a': {'b': 'w'}}['a']['b'] ", " '-}}' ~ \"%}\" "]

    def mark():
        return rng.choice(["", "", "-", "+"])

    def block(body):
        return "{%" + mark() + " " + body + " " + mark() + "%}"

    def gen(depth):
        out = []
        for _ in range(rng.randint(1, 5)):
            r = rng.random()
            if r < 0.4:
                out.append(rng.choice(texts))
            elif r < 0.55:
                out.append("{{" + rng.choice(["", "-"]) + rng.choice(values) + rng.choice(["", "-"]) + "}}")
            elif r < 0.65:
                out.append("{#" + mark() + " c " + mark() + "#}")
            elif r < 0.72:
                out.append(block("set q = 1"))
            elif depth < 3 and r < 0.85:
                out.append(block("if true") + gen(depth + 1) + block("endif"))
            elif depth < 3 and r < 0.93:
                out.append(block("for i in [1, 2]") + gen(depth + 1) + block("endfor"))
            elif depth < 3:
                out.append(block("if false") + gen(depth + 1) + block("else") + gen(depth + 1) + block("endif"))
        return "".join(out)

    out = []
    while len(out) < n:
        t = gen(0)
        try:
            ENV.from_string(t)
        except jinja2.TemplateSyntaxError:
            continue  # "+" where jinja2 takes none, such as "+}}"
        out.append((f"random {seed}.{len(out)}", t, None))
    return out


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


ENV = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
ENV.globals["raise_exception"] = raise_exception


def main():
    cases = []
    for name, template, context in CASES + fuzz_cases(21, 200):
        context = context or {}
        cases.append({
            "name": name,
            "template": template,
            "context": context,
            "expected": ENV.from_string(template).render(**context),
        })
    doc = {
        "note": "Generated by gen_whitespace.py; expected is Python jinja2's rendering.",
        "jinja2": jinja2.__version__,
        "environment": "trim_blocks=True, lstrip_blocks=True",
        "cases": cases,
    }
    path = sys.argv[1] if len(sys.argv) > 1 else "whitespace.json"
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
