"""Chat templates of real models, of every family promptkv formats (docs/engine.md §4.7).

Each entry: the family promptkv must detect, the model, where the text was read, the BOS and EOS texts
of that model's tokenizer, and the tokenizer.chat_template text itself. tools/make-chat-fixtures.py
renders conversations with them through HF transformers' render_jinja_template."""

TEMPLATES = [
    {
        "key": 'openhermes-2.5',
        "family": 'chatml',
        "model": 'teknium/OpenHermes-2.5-Mistral-7B',
        "source": 'llama.cpp tests/test-chat-template.cpp',
        "bos": '<s>',
        "eos": '<|im_end|>',
        "template": (
            "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
        ),
    },
    {
        "key": 'qwen2',
        "family": 'chatml',
        "model": 'Qwen/Qwen2-7B-Instruct',
        "source": 'Qwen/Qwen2-7B-Instruct tokenizer_config.json',
        "bos": '',
        "eos": '<|im_end|>',
        "template": (
            "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
        ),
    },
    {
        "key": 'qwen2.5',
        "family": 'chatml',
        "model": 'Qwen/Qwen2.5-7B-Instruct',
        "source": 'llama.cpp models/templates/Qwen-Qwen2.5-7B-Instruct.jinja',
        "bos": '',
        "eos": '<|im_end|>',
        "template": (
            '{%- if tools %}\n'
            "    {{- '<|im_start|>system\\n' }}\n"
            "    {%- if messages[0]['role'] == 'system' %}\n"
            "        {{- messages[0]['content'] }}\n"
            '    {%- else %}\n'
            "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
            '    {%- endif %}\n'
            '    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}\n'
            '    {%- for tool in tools %}\n'
            '        {{- "\\n" }}\n'
            '        {{- tool | tojson }}\n'
            '    {%- endfor %}\n'
            '    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}\n'
            '{%- else %}\n'
            "    {%- if messages[0]['role'] == 'system' %}\n"
            "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
            '    {%- else %}\n'
            "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
            '    {%- endif %}\n'
            '{%- endif %}\n'
            '{%- for message in messages %}\n'
            '    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}\n'
            "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
            '    {%- elif message.role == "assistant" %}\n'
            "        {{- '<|im_start|>' + message.role }}\n"
            '        {%- if message.content %}\n'
            "            {{- '\\n' + message.content }}\n"
            '        {%- endif %}\n'
            '        {%- for tool_call in message.tool_calls %}\n'
            '            {%- if tool_call.function is defined %}\n'
            '                {%- set tool_call = tool_call.function %}\n'
            '            {%- endif %}\n'
            '            {{- \'\\n<tool_call>\\n{"name": "\' }}\n'
            '            {{- tool_call.name }}\n'
            '            {{- \'", "arguments": \' }}\n'
            '            {{- tool_call.arguments | tojson }}\n'
            "            {{- '}\\n</tool_call>' }}\n"
            '        {%- endfor %}\n'
            "        {{- '<|im_end|>\\n' }}\n"
            '    {%- elif message.role == "tool" %}\n'
            '        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}\n'
            "            {{- '<|im_start|>user' }}\n"
            '        {%- endif %}\n'
            "        {{- '\\n<tool_response>\\n' }}\n"
            '        {{- message.content }}\n'
            "        {{- '\\n</tool_response>' }}\n"
            '        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}\n'
            "            {{- '<|im_end|>\\n' }}\n"
            '        {%- endif %}\n'
            '    {%- endif %}\n'
            '{%- endfor %}\n'
            '{%- if add_generation_prompt %}\n'
            "    {{- '<|im_start|>assistant\\n' }}\n"
            '{%- endif %}\n'
        ),
    },
    {
        "key": 'qwen3',
        "family": 'chatml',
        "model": 'Qwen/Qwen3-0.6B',
        "source": 'llama.cpp models/templates/Qwen-Qwen3-0.6B.jinja',
        "bos": '',
        "eos": '<|im_end|>',
        "template": (
            '{%- if tools %}\n'
            "    {{- '<|im_start|>system\\n' }}\n"
            "    {%- if messages[0].role == 'system' %}\n"
            "        {{- messages[0].content + '\\n\\n' }}\n"
            '    {%- endif %}\n'
            '    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}\n'
            '    {%- for tool in tools %}\n'
            '        {{- "\\n" }}\n'
            '        {{- tool | tojson }}\n'
            '    {%- endfor %}\n'
            '    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}\n'
            '{%- else %}\n'
            "    {%- if messages[0].role == 'system' %}\n"
            "        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
            '    {%- endif %}\n'
            '{%- endif %}\n'
            '{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n'
            '{%- for message in messages[::-1] %}\n'
            '    {%- set index = (messages|length - 1) - loop.index0 %}\n'
            '    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith(\'<tool_response>\') and message.content.endswith(\'</tool_response>\')) %}\n'
            '        {%- set ns.multi_step_tool = false %}\n'
            '        {%- set ns.last_query_index = index %}\n'
            '    {%- endif %}\n'
            '{%- endfor %}\n'
            '{%- for message in messages %}\n'
            '    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}\n'
            "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
            '    {%- elif message.role == "assistant" %}\n'
            '        {%- set content = message.content %}\n'
            "        {%- set reasoning_content = '' %}\n"
            '        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}\n'
            '            {%- set reasoning_content = message.reasoning_content %}\n'
            '        {%- else %}\n'
            "            {%- if '</think>' in message.content %}\n"
            "                {%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}\n"
            "                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n"
            '            {%- endif %}\n'
            '        {%- endif %}\n'
            '        {%- if loop.index0 > ns.last_query_index %}\n'
            '            {%- if loop.last or (not loop.last and reasoning_content) %}\n'
            "                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n"
            '            {%- else %}\n'
            "                {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
            '            {%- endif %}\n'
            '        {%- else %}\n'
            "            {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
            '        {%- endif %}\n'
            '        {%- if message.tool_calls %}\n'
            '            {%- for tool_call in message.tool_calls %}\n'
            '                {%- if (loop.first and content) or (not loop.first) %}\n'
            "                    {{- '\\n' }}\n"
            '                {%- endif %}\n'
            '                {%- if tool_call.function %}\n'
            '                    {%- set tool_call = tool_call.function %}\n'
            '                {%- endif %}\n'
            '                {{- \'<tool_call>\\n{"name": "\' }}\n'
            '                {{- tool_call.name }}\n'
            '                {{- \'", "arguments": \' }}\n'
            '                {%- if tool_call.arguments is string %}\n'
            '                    {{- tool_call.arguments }}\n'
            '                {%- else %}\n'
            '                    {{- tool_call.arguments | tojson }}\n'
            '                {%- endif %}\n'
            "                {{- '}\\n</tool_call>' }}\n"
            '            {%- endfor %}\n'
            '        {%- endif %}\n'
            "        {{- '<|im_end|>\\n' }}\n"
            '    {%- elif message.role == "tool" %}\n'
            '        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}\n'
            "            {{- '<|im_start|>user' }}\n"
            '        {%- endif %}\n'
            "        {{- '\\n<tool_response>\\n' }}\n"
            '        {{- message.content }}\n'
            "        {{- '\\n</tool_response>' }}\n"
            '        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}\n'
            "            {{- '<|im_end|>\\n' }}\n"
            '        {%- endif %}\n'
            '    {%- endif %}\n'
            '{%- endfor %}\n'
            '{%- if add_generation_prompt %}\n'
            "    {{- '<|im_start|>assistant\\n' }}\n"
            '    {%- if enable_thinking is defined and enable_thinking is false %}\n'
            "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
            '    {%- endif %}\n'
            '{%- endif %}'
        ),
    },
    {
        "key": 'qwq-32b',
        "family": 'chatml',
        "model": 'Qwen/QwQ-32B',
        "source": "the GGUF of ollama's qwq:32b (huggingface.js ollama-utils)",
        "bos": '',
        "eos": '<|im_end|>',
        "template": (
            '{%- if tools %}\n'
            "    {{- '<|im_start|>system\\n' }}\n"
            "    {%- if messages[0]['role'] == 'system' %}\n"
            "        {{- messages[0]['content'] }}\n"
            '    {%- else %}\n'
            "        {{- '' }}\n"
            '    {%- endif %}\n'
            '    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}\n'
            '    {%- for tool in tools %}\n'
            '        {{- "\\n" }}\n'
            '        {{- tool | tojson }}\n'
            '    {%- endfor %}\n'
            '    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}\n'
            '{%- else %}\n'
            "    {%- if messages[0]['role'] == 'system' %}\n"
            "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
            '  {%- endif %}\n'
            '{%- endif %}\n'
            '{%- for message in messages %}\n'
            '    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}\n'
            "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
            '    {%- elif message.role == "assistant" and not message.tool_calls %}\n'
            '        {%- set content = message.content %}\n'
            '        {%- if not loop.last %}\n'
            "            {%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}\n"
            '        {%- endif %}\n'
            "        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}\n"
            '    {%- elif message.role == "assistant" %}\n'
            '        {%- set content = message.content %}\n'
            '        {%- if not loop.last %}\n'
            "            {%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}\n"
            '        {%- endif %}\n'
            "        {{- '<|im_start|>' + message.role }}\n"
            '        {%- if message.content %}\n'
            "            {{- '\\n' + content }}\n"
            '        {%- endif %}\n'
            '        {%- for tool_call in message.tool_calls %}\n'
            '            {%- if tool_call.function is defined %}\n'
            '                {%- set tool_call = tool_call.function %}\n'
            '            {%- endif %}\n'
            '            {{- \'\\n<tool_call>\\n{"name": "\' }}\n'
            '            {{- tool_call.name }}\n'
            '            {{- \'", "arguments": \' }}\n'
            '            {{- tool_call.arguments | tojson }}\n'
            "            {{- '}\\n</tool_call>' }}\n"
            '        {%- endfor %}\n'
            "        {{- '<|im_end|>\\n' }}\n"
            '    {%- elif message.role == "tool" %}\n'
            '        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}\n'
            "            {{- '<|im_start|>user' }}\n"
            '        {%- endif %}\n'
            "        {{- '\\n<tool_response>\\n' }}\n"
            '        {{- message.content }}\n'
            "        {{- '\\n</tool_response>' }}\n"
            '        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}\n'
            "            {{- '<|im_end|>\\n' }}\n"
            '        {%- endif %}\n'
            '    {%- endif %}\n'
            '{%- endfor %}\n'
            '{%- if add_generation_prompt %}\n'
            "    {{- '<|im_start|>assistant\\n<think>\\n' }}\n"
            '{%- endif %}\n'
        ),
    },
    {
        "key": 'mistral-7b-v0.2-old',
        "family": 'llama2',
        "model": 'mistralai/Mistral-7B-Instruct-v0.2 (before its v1 template)',
        "source": 'llama.cpp tests/test-chat-template.cpp',
        "bos": '<s>',
        "eos": '</s>',
        "template": (
            "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
        ),
    },
    {
        "key": 'llama-2-chat',
        "family": 'llama2-sys',
        "model": 'meta-llama/Llama-2-7b-chat-hf',
        "source": "the GGUF of ollama's llama2:7b (huggingface.js ollama-utils chat-template-automap.ts)",
        "bos": '<s>',
        "eos": '</s>',
        "template": (
            "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
        ),
    },
    {
        "key": 'llama-3',
        "family": 'llama3',
        "model": 'meta-llama/Meta-Llama-3-8B-Instruct',
        "source": 'meta-llama/Meta-Llama-3-8B-Instruct tokenizer_config.json',
        "bos": '<|begin_of_text|>',
        "eos": '<|eot_id|>',
        "template": (
            "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
        ),
    },
    {
        "key": 'llama-3.1',
        "family": 'llama3',
        "model": 'meta-llama/Llama-3.1-8B-Instruct',
        "source": 'llama.cpp models/templates/meta-llama-Llama-3.1-8B-Instruct.jinja',
        "bos": '<|begin_of_text|>',
        "eos": '<|eot_id|>',
        "template": (
            '{{- bos_token }}\n'
            '{%- if custom_tools is defined %}\n'
            '    {%- set tools = custom_tools %}\n'
            '{%- endif %}\n'
            '{%- if not tools_in_user_message is defined %}\n'
            '    {%- set tools_in_user_message = true %}\n'
            '{%- endif %}\n'
            '{%- if not date_string is defined %}\n'
            '    {%- set date_string = "26 Jul 2024" %}\n'
            '{%- endif %}\n'
            '{%- if not tools is defined %}\n'
            '    {%- set tools = none %}\n'
            '{%- endif %}\n'
            '\n'
            '{#- This block extracts the system message, so we can slot it into the right place. #}\n'
            "{%- if messages[0]['role'] == 'system' %}\n"
            "    {%- set system_message = messages[0]['content']|trim %}\n"
            '    {%- set messages = messages[1:] %}\n'
            '{%- else %}\n'
            '    {%- set system_message = "" %}\n'
            '{%- endif %}\n'
            '\n'
            '{#- System message + builtin tools #}\n'
            '{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}\n'
            '{%- if builtin_tools is defined or tools is not none %}\n'
            '    {{- "Environment: ipython\\n" }}\n'
            '{%- endif %}\n'
            '{%- if builtin_tools is defined %}\n'
            '    {{- "Tools: " + builtin_tools | reject(\'equalto\', \'code_interpreter\') | join(", ") + "\\n\\n"}}\n'
            '{%- endif %}\n'
            '{{- "Cutting Knowledge Date: December 2023\\n" }}\n'
            '{{- "Today Date: " + date_string + "\\n\\n" }}\n'
            '{%- if tools is not none and not tools_in_user_message %}\n'
            '    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}\n'
            '    {{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\' }}\n'
            '    {{- "Do not use variables.\\n\\n" }}\n'
            '    {%- for t in tools %}\n'
            '        {{- t | tojson(indent=4) }}\n'
            '        {{- "\\n\\n" }}\n'
            '    {%- endfor %}\n'
            '{%- endif %}\n'
            '{{- system_message }}\n'
            '{{- "<|eot_id|>" }}\n'
            '\n'
            '{#- Custom tools are passed in a user message with some extra guidance #}\n'
            '{%- if tools_in_user_message and not tools is none %}\n'
            '    {#- Extract the first user message so we can plug it in here #}\n'
            '    {%- if messages | length != 0 %}\n'
            "        {%- set first_user_message = messages[0]['content']|trim %}\n"
            '        {%- set messages = messages[1:] %}\n'
            '    {%- else %}\n'
            '        {{- raise_exception("Cannot put tools in the first user message when there\'s no first user message!") }}\n'
            '{%- endif %}\n'
            "    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}\n"
            '    {{- "Given the following functions, please respond with a JSON for a function call " }}\n'
            '    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}\n'
            '    {{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\' }}\n'
            '    {{- "Do not use variables.\\n\\n" }}\n'
            '    {%- for t in tools %}\n'
            '        {{- t | tojson(indent=4) }}\n'
            '        {{- "\\n\\n" }}\n'
            '    {%- endfor %}\n'
            '    {{- first_user_message + "<|eot_id|>"}}\n'
            '{%- endif %}\n'
            '\n'
            '{%- for message in messages %}\n'
            "    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n"
            "        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n"
            "    {%- elif 'tool_calls' in message %}\n"
            '        {%- if not message.tool_calls|length == 1 %}\n'
            '            {{- raise_exception("This model only supports single tool-calls at once!") }}\n'
            '        {%- endif %}\n'
            '        {%- set tool_call = message.tool_calls[0].function %}\n'
            '        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}\n'
            "            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
            '            {{- "<|python_tag|>" + tool_call.name + ".call(" }}\n'
            '            {%- for arg_name, arg_val in tool_call.arguments | items %}\n'
            '                {{- arg_name + \'="\' + arg_val + \'"\' }}\n'
            '                {%- if not loop.last %}\n'
            '                    {{- ", " }}\n'
            '                {%- endif %}\n'
            '                {%- endfor %}\n'
            '            {{- ")" }}\n'
            '        {%- else  %}\n'
            "            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
            '            {{- \'{"name": "\' + tool_call.name + \'", \' }}\n'
            '            {{- \'"parameters": \' }}\n'
            '            {{- tool_call.arguments | tojson }}\n'
            '            {{- "}" }}\n'
            '        {%- endif %}\n'
            '        {%- if builtin_tools is defined %}\n'
            "            {#- This means we're in ipython mode #}\n"
            '            {{- "<|eom_id|>" }}\n'
            '        {%- else %}\n'
            '            {{- "<|eot_id|>" }}\n'
            '        {%- endif %}\n'
            '    {%- elif message.role == "tool" or message.role == "ipython" %}\n'
            '        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}\n'
            '        {%- if message.content is mapping or message.content is iterable %}\n'
            '            {{- message.content | tojson }}\n'
            '        {%- else %}\n'
            '            {{- message.content }}\n'
            '        {%- endif %}\n'
            '        {{- "<|eot_id|>" }}\n'
            '    {%- endif %}\n'
            '{%- endfor %}\n'
            '{%- if add_generation_prompt %}\n'
            "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
            '{%- endif %}\n'
        ),
    },
    {
        "key": 'llama-3.2',
        "family": 'llama3',
        "model": 'meta-llama/Llama-3.2-3B-Instruct',
        "source": 'llama.cpp models/templates/meta-llama-Llama-3.2-3B-Instruct.jinja',
        "bos": '<|begin_of_text|>',
        "eos": '<|eot_id|>',
        "template": (
            '{{- bos_token }}\n'
            '{%- if custom_tools is defined %}\n'
            '    {%- set tools = custom_tools %}\n'
            '{%- endif %}\n'
            '{%- if not tools_in_user_message is defined %}\n'
            '    {%- set tools_in_user_message = true %}\n'
            '{%- endif %}\n'
            '{%- if not date_string is defined %}\n'
            '    {%- if strftime_now is defined %}\n'
            '        {%- set date_string = strftime_now("%d %b %Y") %}\n'
            '    {%- else %}\n'
            '        {%- set date_string = "26 Jul 2024" %}\n'
            '    {%- endif %}\n'
            '{%- endif %}\n'
            '{%- if not tools is defined %}\n'
            '    {%- set tools = none %}\n'
            '{%- endif %}\n'
            '\n'
            '{#- This block extracts the system message, so we can slot it into the right place. #}\n'
            "{%- if messages[0]['role'] == 'system' %}\n"
            "    {%- set system_message = messages[0]['content']|trim %}\n"
            '    {%- set messages = messages[1:] %}\n'
            '{%- else %}\n'
            '    {%- set system_message = "" %}\n'
            '{%- endif %}\n'
            '\n'
            '{#- System message #}\n'
            '{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}\n'
            '{%- if tools is not none %}\n'
            '    {{- "Environment: ipython\\n" }}\n'
            '{%- endif %}\n'
            '{{- "Cutting Knowledge Date: December 2023\\n" }}\n'
            '{{- "Today Date: " + date_string + "\\n\\n" }}\n'
            '{%- if tools is not none and not tools_in_user_message %}\n'
            '    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}\n'
            '    {{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\' }}\n'
            '    {{- "Do not use variables.\\n\\n" }}\n'
            '    {%- for t in tools %}\n'
            '        {{- t | tojson(indent=4) }}\n'
            '        {{- "\\n\\n" }}\n'
            '    {%- endfor %}\n'
            '{%- endif %}\n'
            '{{- system_message }}\n'
            '{{- "<|eot_id|>" }}\n'
            '\n'
            '{#- Custom tools are passed in a user message with some extra guidance #}\n'
            '{%- if tools_in_user_message and not tools is none %}\n'
            '    {#- Extract the first user message so we can plug it in here #}\n'
            '    {%- if messages | length != 0 %}\n'
            "        {%- set first_user_message = messages[0]['content']|trim %}\n"
            '        {%- set messages = messages[1:] %}\n'
            '    {%- else %}\n'
            '        {{- raise_exception("Cannot put tools in the first user message when there\'s no first user message!") }}\n'
            '{%- endif %}\n'
            "    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}\n"
            '    {{- "Given the following functions, please respond with a JSON for a function call " }}\n'
            '    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}\n'
            '    {{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\' }}\n'
            '    {{- "Do not use variables.\\n\\n" }}\n'
            '    {%- for t in tools %}\n'
            '        {{- t | tojson(indent=4) }}\n'
            '        {{- "\\n\\n" }}\n'
            '    {%- endfor %}\n'
            '    {{- first_user_message + "<|eot_id|>"}}\n'
            '{%- endif %}\n'
            '\n'
            '{%- for message in messages %}\n'
            "    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n"
            "        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n"
            "    {%- elif 'tool_calls' in message %}\n"
            '        {%- if not message.tool_calls|length == 1 %}\n'
            '            {{- raise_exception("This model only supports single tool-calls at once!") }}\n'
            '        {%- endif %}\n'
            '        {%- set tool_call = message.tool_calls[0].function %}\n'
            "        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
            '        {{- \'{"name": "\' + tool_call.name + \'", \' }}\n'
            '        {{- \'"parameters": \' }}\n'
            '        {{- tool_call.arguments | tojson }}\n'
            '        {{- "}" }}\n'
            '        {{- "<|eot_id|>" }}\n'
            '    {%- elif message.role == "tool" or message.role == "ipython" %}\n'
            '        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}\n'
            '        {%- if message.content is mapping or message.content is iterable %}\n'
            '            {{- message.content | tojson }}\n'
            '        {%- else %}\n'
            '            {{- message.content }}\n'
            '        {%- endif %}\n'
            '        {{- "<|eot_id|>" }}\n'
            '    {%- endif %}\n'
            '{%- endfor %}\n'
            '{%- if add_generation_prompt %}\n'
            "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
            '{%- endif %}\n'
        ),
    },
    {
        "key": 'mistral-v1',
        "family": 'mistral-v1',
        "model": 'mistralai/Mistral-7B-Instruct-v0.2 (its v1 template)',
        "source": 'llama.cpp tests/test-chat-template.cpp',
        "bos": '<s>',
        "eos": '</s>',
        "template": (
            "{%- if messages[0]['role'] == 'system' %}\n"
            "    {%- set system_message = messages[0]['content'] %}\n"
            '    {%- set loop_messages = messages[1:] %}\n'
            '{%- else %}\n'
            '    {%- set loop_messages = messages %}\n'
            '{%- endif %}\n'
            '\n'
            '{{- bos_token }}\n'
            '{%- for message in loop_messages %}\n'
            "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
            "        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}\n"
            '    {%- endif %}\n'
            "    {%- if message['role'] == 'user' %}\n"
            '        {%- if loop.first and system_message is defined %}\n'
            "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
            '        {%- else %}\n'
            "            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n"
            '        {%- endif %}\n'
            "    {%- elif message['role'] == 'assistant' %}\n"
            "        {{- ' ' + message['content'] + eos_token}}\n"
            '    {%- else %}\n'
            "        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}\n"
            '    {%- endif %}\n'
            '{%- endfor %}\n'
        ),
    },
    {
        "key": 'mistral-7b-v0.3',
        "family": 'mistral-v3',
        "model": 'mistralai/Mistral-7B-Instruct-v0.3',
        "source": 'optimum-intel optimum/exporters/openvino/utils.py COMPLEX_CHAT_TEMPLATES',
        "bos": '<s>',
        "eos": '</s>',
        "template": (
            '{%- if messages[0]["role"] == "system" %}\n'
            '    {%- set system_message = messages[0]["content"] %}\n'
            '    {%- set loop_messages = messages[1:] %}\n'
            '{%- else %}\n'
            '    {%- set loop_messages = messages %}\n'
            '{%- endif %}\n'
            '{%- if not tools is defined %}\n'
            '    {%- set tools = none %}\n'
            '{%- endif %}\n'
            '{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}\n'
            '\n'
            '{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}\n'
            '{%- set ns = namespace() %}\n'
            '{%- set ns.index = 0 %}\n'
            '{%- for message in loop_messages %}\n'
            '    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}\n'
            '        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}\n'
            '            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}\n'
            '        {%- endif %}\n'
            '        {%- set ns.index = ns.index + 1 %}\n'
            '    {%- endif %}\n'
            '{%- endfor %}\n'
            '\n'
            '{{- bos_token }}\n'
            '{%- for message in loop_messages %}\n'
            '    {%- if message["role"] == "user" %}\n'
            '        {%- if tools is not none and (message == user_messages[-1]) %}\n'
            '            {{- "[AVAILABLE_TOOLS] [" }}\n'
            '            {%- for tool in tools %}\n'
            '                {%- set tool = tool.function %}\n'
            '                {{- \'{"type": "function", "function": {\' }}\n'
            '                {%- for key, val in tool.items() if key != "return" %}\n'
            '                    {%- if val is string %}\n'
            '                        {{- \'"\' + key + \'": "\' + val + \'"\' }}\n'
            '                    {%- else %}\n'
            '                        {{- \'"\' + key + \'": \' + val|tojson }}\n'
            '                    {%- endif %}\n'
            '                    {%- if not loop.last %}\n'
            '                        {{- ", " }}\n'
            '                    {%- endif %}\n'
            '                {%- endfor %}\n'
            '                {{- "}}" }}\n'
            '                {%- if not loop.last %}\n'
            '                    {{- ", " }}\n'
            '                {%- else %}\n'
            '                    {{- "]" }}\n'
            '                {%- endif %}\n'
            '            {%- endfor %}\n'
            '            {{- "[/AVAILABLE_TOOLS]" }}\n'
            '            {%- endif %}\n'
            '        {%- if loop.last and system_message is defined %}\n'
            '            {{- "[INST] " + system_message + "\\n\\n" + message["content"] + "[/INST]" }}\n'
            '        {%- else %}\n'
            '            {{- "[INST] " + message["content"] + "[/INST]" }}\n'
            '        {%- endif %}\n'
            '    {%- elif message.tool_calls is defined and message.tool_calls is not none %}\n'
            '        {{- "[TOOL_CALLS] [" }}\n'
            '        {%- for tool_call in message.tool_calls %}\n'
            '            {%- set out = tool_call.function|tojson %}\n'
            '            {{- out[:-1] }}\n'
            '            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}\n'
            '                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}\n'
            '            {%- endif %}\n'
            '            {{- \', "id": "\' + tool_call.id + \'"}\' }}\n'
            '            {%- if not loop.last %}\n'
            '                {{- ", " }}\n'
            '            {%- else %}\n'
            '                {{- "]" + eos_token }}\n'
            '            {%- endif %}\n'
            '        {%- endfor %}\n'
            '    {%- elif message["role"] == "assistant" %}\n'
            '        {{- " " + message["content"]|trim + eos_token}}\n'
            '    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}\n'
            '        {%- if message.content is defined and message.content.content is defined %}\n'
            '            {%- set content = message.content.content %}\n'
            '        {%- else %}\n'
            '            {%- set content = message.content %}\n'
            '        {%- endif %}\n'
            '        {{- \'[TOOL_RESULTS] {"content": \' + content|string + ", " }}\n'
            '        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}\n'
            '            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}\n'
            '        {%- endif %}\n'
            '        {{- \'"call_id": "\' + message.tool_call_id + \'"}[/TOOL_RESULTS]\' }}\n'
            '    {%- else %}\n'
            '        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}\n'
            '    {%- endif %}\n'
            '{%- endfor %}\n'
        ),
    },
    {
        "key": 'mistral-nemo',
        "family": 'mistral-v3-tekken',
        "model": 'mistralai/Mistral-Nemo-Instruct-2407',
        "source": 'llama.cpp models/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja',
        "bos": '<s>',
        "eos": '</s>',
        "template": (
            '{%- if messages[0]["role"] == "system" %}\n'
            '    {%- set system_message = messages[0]["content"] %}\n'
            '    {%- set loop_messages = messages[1:] %}\n'
            '{%- else %}\n'
            '    {%- set loop_messages = messages %}\n'
            '{%- endif %}\n'
            '{%- if not tools is defined %}\n'
            '    {%- set tools = none %}\n'
            '{%- endif %}\n'
            '{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}\n'
            '\n'
            '{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}\n'
            '{%- set ns = namespace() %}\n'
            '{%- set ns.index = 0 %}\n'
            '{%- for message in loop_messages %}\n'
            '    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}\n'
            '        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}\n'
            '            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}\n'
            '        {%- endif %}\n'
            '        {%- set ns.index = ns.index + 1 %}\n'
            '    {%- endif %}\n'
            '{%- endfor %}\n'
            '\n'
            '{{- bos_token }}\n'
            '{%- for message in loop_messages %}\n'
            '    {%- if message["role"] == "user" %}\n'
            '        {%- if tools is not none and (message == user_messages[-1]) %}\n'
            '            {{- "[AVAILABLE_TOOLS][" }}\n'
            '            {%- for tool in tools %}\n'
            '                {%- set tool = tool.function %}\n'
            '                {{- \'{"type": "function", "function": {\' }}\n'
            '                {%- for key, val in tool.items() if key != "return" %}\n'
            '                    {%- if val is string %}\n'
            '                        {{- \'"\' + key + \'": "\' + val + \'"\' }}\n'
            '                    {%- else %}\n'
            '                        {{- \'"\' + key + \'": \' + val|tojson }}\n'
            '                    {%- endif %}\n'
            '                    {%- if not loop.last %}\n'
            '                        {{- ", " }}\n'
            '                    {%- endif %}\n'
            '                {%- endfor %}\n'
            '                {{- "}}" }}\n'
            '                {%- if not loop.last %}\n'
            '                    {{- ", " }}\n'
            '                {%- else %}\n'
            '                    {{- "]" }}\n'
            '                {%- endif %}\n'
            '            {%- endfor %}\n'
            '            {{- "[/AVAILABLE_TOOLS]" }}\n'
            '            {%- endif %}\n'
            '        {%- if loop.last and system_message is defined %}\n'
            '            {{- "[INST]" + system_message + "\\n\\n" + message["content"] + "[/INST]" }}\n'
            '        {%- else %}\n'
            '            {{- "[INST]" + message["content"] + "[/INST]" }}\n'
            '        {%- endif %}\n'
            '    {%- elif (message.tool_calls is defined and message.tool_calls is not none) %}\n'
            '        {{- "[TOOL_CALLS][" }}\n'
            '        {%- for tool_call in message.tool_calls %}\n'
            '            {%- set out = tool_call.function|tojson %}\n'
            '            {{- out[:-1] }}\n'
            '            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}\n'
            '                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}\n'
            '            {%- endif %}\n'
            '            {{- \', "id": "\' + tool_call.id + \'"}\' }}\n'
            '            {%- if not loop.last %}\n'
            '                {{- ", " }}\n'
            '            {%- else %}\n'
            '                {{- "]" + eos_token }}\n'
            '            {%- endif %}\n'
            '        {%- endfor %}\n'
            '    {%- elif message["role"] == "assistant" %}\n'
            '        {{- message["content"] + eos_token}}\n'
            '    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}\n'
            '        {%- if message.content is defined and message.content.content is defined %}\n'
            '            {%- set content = message.content.content %}\n'
            '        {%- else %}\n'
            '            {%- set content = message.content %}\n'
            '        {%- endif %}\n'
            '        {{- \'[TOOL_RESULTS]{"content": \' + content|string + ", " }}\n'
            '        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}\n'
            '            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}\n'
            '        {%- endif %}\n'
            '        {{- \'"call_id": "\' + message.tool_call_id + \'"}[/TOOL_RESULTS]\' }}\n'
            '    {%- else %}\n'
            '        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}\n'
            '    {%- endif %}\n'
            '{%- endfor %}\n'
        ),
    },
    {
        "key": 'mistral-large-2411',
        "family": 'mistral-v7',
        "model": 'mistralai/Mistral-Large-Instruct-2411',
        "source": 'llama.cpp tests/test-chat-template.cpp',
        "bos": '<s>',
        "eos": '</s>',
        "template": (
            "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}{% else %}{{ raise_exception('Only user, system and assistant roles are supported!') }}{% endif %}{% endfor %}"
        ),
    },
    {
        "key": 'mistral-small-24b-2501',
        "family": 'mistral-v7-tekken',
        "model": 'mistralai/Mistral-Small-24B-Instruct-2501',
        "source": "the GGUF of ollama's mistral-small:24b (huggingface.js ollama-utils)",
        "bos": '<s>',
        "eos": '</s>',
        "template": (
            "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST]' + message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}{{ '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% else %}{{ raise_exception('Only user, system and assistant roles are supported!') }}{% endif %}{% endfor %}"
        ),
    },
    {
        "key": 'phi-3.5-mini',
        "family": 'phi3',
        "model": 'microsoft/Phi-3.5-mini-instruct',
        "source": 'llama.cpp models/templates/microsoft-Phi-3.5-mini-instruct.jinja',
        "bos": '<s>',
        "eos": '<|endoftext|>',
        "template": (
            "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}{{'<|system|>\n"
            "' + message['content'] + '<|end|>\n"
            "'}}{% elif message['role'] == 'user' %}{{'<|user|>\n"
            "' + message['content'] + '<|end|>\n"
            "'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n"
            "' + message['content'] + '<|end|>\n"
            "'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n"
            "' }}{% else %}{{ eos_token }}{% endif %}"
        ),
    },
    {
        "key": 'phi-3-mini',
        "family": 'phi3',
        "model": 'microsoft/Phi-3-mini-4k-instruct',
        "source": "the GGUF of ollama's phi3:3.8b (huggingface.js ollama-utils)",
        "bos": '<s>',
        "eos": '<|endoftext|>',
        "template": (
            "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n"
            "' + message['content'] + '<|end|>\n"
            "'}}{% elif message['role'] == 'user' %}{{'<|user|>\n"
            "' + message['content'] + '<|end|>\n"
            "'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n"
            "' + message['content'] + '<|end|>\n"
            "'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n"
            "' }}{% else %}{{ eos_token }}{% endif %}"
        ),
    },
    {
        "key": 'phi-4-mini',
        "family": 'phi3',
        "model": 'microsoft/Phi-4-mini-instruct',
        "source": "the GGUF of ollama's phi4-mini:3.8b (huggingface.js ollama-utils)",
        "bos": '<|endoftext|>',
        "eos": '<|endoftext|>',
        "template": (
            "{% for message in messages %}{% if message['role'] == 'system' and 'tools' in message and message['tools'] is not none %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|tool|>' + message['tools'] + '<|/tool|>' + '<|end|>' }}{% else %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}"
        ),
    },
    {
        "key": 'phi-4',
        "family": 'phi4',
        "model": 'microsoft/phi-4',
        "source": 'llama.cpp tests/test-chat-template.cpp',
        "bos": '<|endoftext|>',
        "eos": '<|im_end|>',
        "template": (
            "{% for message in messages %}{% if (message['role'] == 'system') %}{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}{% elif (message['role'] == 'user') %}{{'<|im_start|>user<|im_sep|>' + message['content'] + '<|im_end|><|im_start|>assistant<|im_sep|>'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|im_end|>'}}{% endif %}{% endfor %}"
        ),
    },
    {
        "key": 'gemma-3',
        "family": 'gemma',
        "model": 'google/gemma-3-270m-it',
        "source": 'google/gemma-3-*-it tokenizer_config.json',
        "bos": '<bos>',
        "eos": '<eos>',
        "template": (
            '{{ bos_token }}\n'
            "{%- if messages[0]['role'] == 'system' -%}\n"
            "    {%- if messages[0]['content'] is string -%}\n"
            "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
            '    {%- else -%}\n'
            "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n"
            '    {%- endif -%}\n'
            '    {%- set loop_messages = messages[1:] -%}\n'
            '{%- else -%}\n'
            '    {%- set first_user_prefix = "" -%}\n'
            '    {%- set loop_messages = messages -%}\n'
            '{%- endif -%}\n'
            '{%- for message in loop_messages -%}\n'
            "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
            '        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}\n'
            '    {%- endif -%}\n'
            "    {%- if (message['role'] == 'assistant') -%}\n"
            '        {%- set role = "model" -%}\n'
            '    {%- else -%}\n'
            "        {%- set role = message['role'] -%}\n"
            '    {%- endif -%}\n'
            '    {{ \'<start_of_turn>\' + role + \'\\n\' + (first_user_prefix if loop.first else "") }}\n'
            "    {%- if message['content'] is string -%}\n"
            "        {{ message['content'] | trim }}\n"
            "    {%- elif message['content'] is iterable -%}\n"
            "        {%- for item in message['content'] -%}\n"
            "            {%- if item['type'] == 'image' -%}\n"
            "                {{ '<start_of_image>' }}\n"
            "            {%- elif item['type'] == 'text' -%}\n"
            "                {{ item['text'] | trim }}\n"
            '            {%- endif -%}\n'
            '        {%- endfor -%}\n'
            '    {%- else -%}\n'
            '        {{ raise_exception("Invalid content type") }}\n'
            '    {%- endif -%}\n'
            "    {{ '<end_of_turn>\\n' }}\n"
            '{%- endfor -%}\n'
            '{%- if add_generation_prompt -%}\n'
            "    {{'<start_of_turn>model\\n'}}\n"
            '{%- endif -%}\n'
        ),
    },
    {
        "key": 'gemma-2',
        "family": 'gemma',
        "model": 'google/gemma-2-2b-it',
        "source": 'llama.cpp models/templates/google-gemma-2-2b-it.jinja',
        "bos": '<bos>',
        "eos": '<eos>',
        "template": (
            "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n"
            "' + message['content'] | trim + '<end_of_turn>\n"
            "' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n"
            "'}}{% endif %}"
        ),
    },
    {
        "key": 'deepseek-coder',
        "family": 'deepseek',
        "model": 'deepseek-ai/deepseek-coder-33b-instruct',
        "source": 'llama.cpp tests/test-chat-template.cpp',
        "bos": '<｜begin▁of▁sentence｜>',
        "eos": '<|EOT|>',
        "template": (
            '{% if not add_generation_prompt is defined %}\n'
            '{% set add_generation_prompt = false %}\n'
            '{% endif %}\n'
            '{%- set ns = namespace(found=false) -%}\n'
            '{%- for message in messages -%}\n'
            "    {%- if message['role'] == 'system' -%}\n"
            '        {%- set ns.found = true -%}\n'
            '    {%- endif -%}\n'
            '{%- endfor -%}\n'
            '{{bos_token}}{%- if not ns.found -%}\n'
            "{{'You are an AI programming assistant, utilizing the Deepseek Coder model, developed by Deepseek Company, and you only answer questions related to computer science. For politically sensitive questions, security and privacy issues, and other non-computer science questions, you will refuse to answer\\n'}}\n"
            '{%- endif %}\n'
            '{%- for message in messages %}\n'
            "    {%- if message['role'] == 'system' %}\n"
            "{{ message['content'] }}\n"
            '    {%- else %}\n'
            "        {%- if message['role'] == 'user' %}\n"
            "{{'### Instruction:\\n' + message['content'] + '\\n'}}\n"
            '        {%- else %}\n'
            "{{'### Response:\\n' + message['content'] + '\\n<|EOT|>\\n'}}\n"
            '        {%- endif %}\n'
            '    {%- endif %}\n'
            '{%- endfor %}\n'
            '{% if add_generation_prompt %}\n'
            "{{'### Response:'}}\n"
            '{% endif %}'
        ),
    },
    {
        "key": 'deepseek-v3',
        "family": 'deepseek3',
        "model": 'deepseek-ai/DeepSeek-V3',
        "source": "the GGUF of ollama's deepseek-v3:671b (huggingface.js ollama-utils)",
        "bos": '<｜begin▁of▁sentence｜>',
        "eos": '<｜end▁of▁sentence｜>',
        "template": (
            "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='', is_first_sp=true) %}{%- for message in messages %}{%- if message['role'] == 'system' %}{%- if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}{%- else %}{% set ns.system_prompt = ns.system_prompt + '\n"
            '\n'
            "' + message['content'] %}{%- endif %}{%- endif %}{%- endfor %}{{bos_token}}{{ns.system_prompt}}{%- for message in messages %}{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is none %}{%- set ns.is_tool = false -%}{%- for tool in message['tool_calls']%}{%- if not ns.is_first %}{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n"
            "' + '```json' + '\n"
            "' + tool['function']['arguments'] + '\n"
            "' + '```' + '<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}{%- else %}{{'\n"
            "' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n"
            "' + '```json' + '\n"
            "' + tool['function']['arguments'] + '\n"
            "' + '```' + '<｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is not none %}{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}{%- else %}{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- set ns.is_output_first = false %}{%- else %}{{'\n"
            "<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %}"
        ),
    },
    {
        "key": 'deepseek-r1-distill',
        "family": 'deepseek3',
        "model": 'deepseek-ai/DeepSeek-R1-Distill-Llama-8B',
        "source": 'llama.cpp models/templates/deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja',
        "bos": '<｜begin▁of▁sentence｜>',
        "eos": '<｜end▁of▁sentence｜>',
        "template": (
            '{% if not add_generation_prompt is defined -%}\n'
            '  {%- set add_generation_prompt = false -%}\n'
            '{%- endif -%}\n'
            "{%- set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') -%}\n"
            '{%- for message in messages -%}\n'
            "  {%- if message['role'] == 'system' -%}\n"
            "    {%- set ns.system_prompt = message['content'] -%}\n"
            '  {%- endif -%}\n'
            '{%- endfor -%}{{bos_token}}{{ns.system_prompt}}\n'
            '{%- for message in messages -%}\n'
            "  {%- if message['role'] == 'user' -%}\n"
            "    {%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}\n"
            '  {%- endif -%}\n'
            "  {%- if message['role'] == 'assistant' and message['content'] is none -%}\n"
            '    {%- set ns.is_tool = false -%}\n'
            "    {%- for tool in message['tool_calls']-%}\n"
            "      {%- if not ns.is_first -%}{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}\n"
            '        {%- set ns.is_first = true -%}\n'
            "        {%- else -%}{{'\\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}\n"
            '      {%- endif -%}\n'
            '    {%- endfor -%}\n'
            '  {%- endif -%}\n'
            "  {%- if message['role'] == 'assistant' and message['content'] is not none -%}\n"
            "    {%- if ns.is_tool -%}{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}\n"
            '      {%- set ns.is_tool = false -%}\n'
            '      {%- else -%}\n'
            "      {%- set content = message['content'] -%}\n"
            "      {%- if '</think>' in content -%}\n"
            "        {%- set content = content.split('</think>')[-1] -%}\n"
            "      {%- endif -%}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}\n"
            '    {%- endif -%}\n'
            '  {%- endif -%}\n'
            "  {%- if message['role'] == 'tool' -%}\n"
            '    {%- set ns.is_tool = true -%}\n'
            "    {%- if ns.is_output_first -%}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}\n"
            '      {%- set ns.is_output_first = false -%}\n'
            "      {%- else -%}{{'\\n<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}\n"
            '    {%- endif -%}\n'
            '  {%- endif -%}\n'
            '{%- endfor -%}\n'
            "{%- if ns.is_tool -%}{{'<｜tool▁outputs▁end｜>'}}\n"
            '{%- endif -%}\n'
            "{%- if add_generation_prompt and not ns.is_tool -%}{{'<｜Assistant｜><think>\\n'}}\n"
            '{%- endif %}'
        ),
    },
    {
        "key": 'command-r',
        "family": 'command-r',
        "model": 'CohereForAI/c4ai-command-r-v01',
        "source": "the GGUF of ollama's command-r:35b (huggingface.js ollama-utils)",
        "bos": '<BOS_TOKEN>',
        "eos": '<|END_OF_TURN_TOKEN|>',
        "template": (
            "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% elif false == true %}{% set loop_messages = messages %}{% set system_message = 'You are a large language model called Command R built by the company Cohere. You act as a brilliant, sophisticated, AI-assistant chatbot trained to assist human users by providing thorough responses.' %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% if system_message != false %}{{ '<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>' + system_message + '<|END_OF_TURN_TOKEN|>' }}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% set content = message['content'] %}{% if message['role'] == 'user' %}{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + content.strip() + '<|END_OF_TURN_TOKEN|>' }}{% elif message['role'] == 'assistant' %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>'  + content.strip() + '<|END_OF_TURN_TOKEN|>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{% endif %}"
        ),
    },
    {
        "key": 'tinyllama-chat',
        "family": 'zephyr',
        "model": "TinyLlama/TinyLlama-1.1B-Chat-v1.0 (zephyr-7b-beta's template)",
        "source": "the GGUF of ollama's tinyllama:1.1b (huggingface.js ollama-utils)",
        "bos": '<s>',
        "eos": '</s>',
        "template": (
            '{% for message in messages %}\n'
            "{% if message['role'] == 'user' %}\n"
            "{{ '<|user|>\n"
            "' + message['content'] + eos_token }}\n"
            "{% elif message['role'] == 'system' %}\n"
            "{{ '<|system|>\n"
            "' + message['content'] + eos_token }}\n"
            "{% elif message['role'] == 'assistant' %}\n"
            "{{ '<|assistant|>\n"
            "'  + message['content'] + eos_token }}\n"
            '{% endif %}\n'
            '{% if loop.last and add_generation_prompt %}\n'
            "{{ '<|assistant|>' }}\n"
            '{% endif %}\n'
            '{% endfor %}'
        ),
    },
    {
        "key": 'vicuna',
        "family": 'vicuna',
        "model": 'eachadea/vicuna-13b-1.1',
        "source": "llama.cpp tests/test-chat-template.cpp (vicuna 1.1 ships no template; llama.cpp's rendering of its format)",
        "bos": '<s>',
        "eos": '</s>',
        "template": (
            "{%- for message in messages %}{%- if message['role'] == 'system' -%}{{- '' + message['content'] + '\n"
            '\n'
            "' -}}{%- else -%}{%- if message['role'] == 'user' -%}{{-'USER: ' + message['content'] + '\n"
            "'-}}{%- else -%}{{-'ASSISTANT: ' + message['content'] + '</s>\n"
            "' -}}{%- endif -%}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{-'ASSISTANT:'-}}{%- endif -%}"
        ),
    },
    {
        "key": 'orca-vicuna',
        "family": 'vicuna-orca',
        "model": 'Orca-Vicuna',
        "source": 'llama.cpp tests/test-chat-template.cpp',
        "bos": '<s>',
        "eos": '</s>',
        "template": (
            "{%- for message in messages %}{%- if message['role'] == 'system' -%}{{-'SYSTEM: ' + message['content'] + '\n"
            "' -}}{%- else -%}{%- if message['role'] == 'user' -%}{{-'USER: ' + message['content'] + '\n"
            "'-}}{%- else -%}{{-'ASSISTANT: ' + message['content'] + '</s>\n"
            "' -}}{%- endif -%}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{-'ASSISTANT:'-}}{%- endif -%}"
        ),
    },
    {
        "key": 'openchat-3.5',
        "family": 'openchat',
        "model": 'openchat/openchat-3.5-0106',
        "source": 'llama.cpp tests/test-chat-template.cpp',
        "bos": '<s>',
        "eos": '<|end_of_turn|>',
        "template": (
            "{{ bos_token }}{% for message in messages %}{{ 'GPT4 Correct ' + message['role'].title() + ': ' + message['content'] + '<|end_of_turn|>'}}{% endfor %}{% if add_generation_prompt %}{{ 'GPT4 Correct Assistant:' }}{% endif %}"
        ),
    },
    {
        "key": 'granite-3.0',
        "family": 'granite',
        "model": 'ibm-granite/granite-3.0-8b-instruct',
        "source": 'llama.cpp tests/test-chat-template.cpp',
        "bos": '<|end_of_text|>',
        "eos": '<|end_of_text|>',
        "template": (
            '{%- if tools %}\n'
            "    {{- '<|start_of_role|>available_tools<|end_of_role|>\n"
            "' }}\n"
            '    {%- for tool in tools %}\n'
            '    {{- tool | tojson(indent=4) }}\n'
            '    {%- if not loop.last %}\n'
            "        {{- '\n"
            '\n'
            "' }}\n"
            '    {%- endif %}\n'
            '    {%- endfor %}\n'
            "    {{- '<|end_of_text|>\n"
            "' }}\n"
            '{%- endif %}\n'
            '{%- for message in messages %}\n'
            "    {%- if message['role'] == 'system' %}\n"
            "    {{- '<|start_of_role|>system<|end_of_role|>' + message['content'] + '<|end_of_text|>\n"
            "' }}\n"
            "    {%- elif message['role'] == 'user' %}\n"
            "    {{- '<|start_of_role|>user<|end_of_role|>' + message['content'] + '<|end_of_text|>\n"
            "' }}\n"
            "    {%- elif message['role'] == 'assistant' %}\n"
            "    {{- '<|start_of_role|>assistant<|end_of_role|>'  + message['content'] + '<|end_of_text|>\n"
            "' }}\n"
            "    {%- elif message['role'] == 'assistant_tool_call' %}\n"
            "    {{- '<|start_of_role|>assistant<|end_of_role|><|tool_call|>' + message['content'] + '<|end_of_text|>\n"
            "' }}\n"
            "    {%- elif message['role'] == 'tool_response' %}\n"
            "    {{- '<|start_of_role|>tool_response<|end_of_role|>' + message['content'] + '<|end_of_text|>\n"
            "' }}\n"
            '    {%- endif %}\n'
            '    {%- if loop.last and add_generation_prompt %}\n'
            "    {{- '<|start_of_role|>assistant<|end_of_role|>' }}\n"
            '    {%- endif %}\n'
            '{%- endfor %}'
        ),
    },
    {
        "key": 'granite-3.1',
        "family": 'granite',
        "model": 'ibm-granite/granite-3.1-1b-a400m-instruct',
        "source": "the GGUF of ollama's granite3.1-moe:1b (huggingface.js ollama-utils)",
        "bos": '<|end_of_text|>',
        "eos": '<|end_of_text|>',
        "template": (
            "{%- if messages[0]['role'] == 'system' %}\n"
            "    {%- set system_message = messages[0]['content'] %}\n"
            '    {%- set loop_messages = messages[1:] %}\n'
            '{%- else %}\n'
            '    {%- set system_message = "Knowledge Cutoff Date: April 2024.\n'
            'Today\'s Date: " + strftime_now(\'%B %d, %Y\') + ".\n'
            'You are Granite, developed by IBM." %}\n'
            '    {%- if tools and documents %}\n'
            '        {%- set system_message = system_message + " You are a helpful AI assistant with access to the following tools. When a tool is required to answer the user\'s query, respond with <|tool_call|> followed by a JSON list of tools used. If a tool does not exist in the provided list of tools, notify the user that you do not have the ability to fulfill the request.\n'
            '\n'
            'Write the response to the user\'s input by strictly aligning with the facts in the provided documents. If the information needed to answer the question is not available in the documents, inform the user that the question cannot be answered based on the available data." %}\n'
            '    {%- elif tools %}\n'
            '        {%- set system_message = system_message + " You are a helpful AI assistant with access to the following tools. When a tool is required to answer the user\'s query, respond with <|tool_call|> followed by a JSON list of tools used. If a tool does not exist in the provided list of tools, notify the user that you do not have the ability to fulfill the request." %}\n'
            '    {%- elif documents %}\n'
            '        {%- set system_message = system_message + " Write the response to the user\'s input by strictly aligning with the facts in the provided documents. If the information needed to answer the question is not available in the documents, inform the user that the question cannot be answered based on the available data." %}\n'
            '    {%- else %}\n'
            '        {%- set system_message = system_message + " You are a helpful AI assistant." %}    \n'
            '    {%- endif %}\n'
            "    {%- if 'citations' in controls and documents %}\n"
            "        {%- set system_message = system_message + '\n"
            '\n'
            "In your response, use the symbols <co> and </co> to indicate when a fact comes from a document in the search result, e.g <co>0</co> for a fact from document 0. Afterwards, list all the citations with their corresponding documents in an ordered list.' %}\n"
            '    {%- endif %}\n'
            "    {%- if 'hallucinations' in controls and documents %}\n"
            "        {%- set system_message = system_message + '\n"
            '\n'
            "Finally, after the response is written, include a numbered list of sentences from the response that are potentially hallucinated and not based in the documents.' %}\n"
            '    {%- endif %}\n'
            '    {%- set loop_messages = messages %}\n'
            '{%- endif %}\n'
            "{{- '<|start_of_role|>system<|end_of_role|>' + system_message + '<|end_of_text|>\n"
            "' }}\n"
            '{%- if tools %}\n'
            "    {{- '<|start_of_role|>tools<|end_of_role|>' }}\n"
            '    {{- tools | tojson(indent=4) }}\n'
            "    {{- '<|end_of_text|>\n"
            "' }}\n"
            '{%- endif %}\n'
            '{%- if documents %}\n'
            "    {{- '<|start_of_role|>documents<|end_of_role|>' }}\n"
            '    {%- for document in documents %}\n'
            "        {{- 'Document ' + loop.index0 | string + '\n"
            "' }}\n"
            "        {{- document['text'] }}\n"
            '        {%- if not loop.last %}\n'
            "            {{- '\n"
            '\n'
            "'}}\n"
            '        {%- endif%}\n'
            '    {%- endfor %}\n'
            "    {{- '<|end_of_text|>\n"
            "' }}\n"
            '{%- endif %}\n'
            '{%- for message in loop_messages %}\n'
            "    {{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + '<|end_of_text|>\n"
            "' }}\n"
            '    {%- if loop.last and add_generation_prompt %}\n'
            "        {{- '<|start_of_role|>assistant' }}\n"
            '            {%- if controls %}\n'
            "                {{- ' ' + controls | tojson()}}\n"
            '            {%- endif %}\n'
            "        {{- '<|end_of_role|>' }}\n"
            '    {%- endif %}\n'
            '{%- endfor %}'
        ),
    },
    {
        "key": 'granite-3.2',
        "family": 'granite',
        "model": 'ibm-granite/granite-3.2-8b-instruct',
        "source": "the GGUF of ollama's granite3.2:8b (huggingface.js ollama-utils)",
        "bos": '<|end_of_text|>',
        "eos": '<|end_of_text|>',
        "template": (
            "{%- if messages[0]['role'] == 'system' %}\n"
            "    {%- set system_message = messages[0]['content'] %}\n"
            '    {%- set loop_messages = messages[1:] %}\n'
            '{%- else %}\n'
            '    {%- set system_message = "Knowledge Cutoff Date: April 2024.\n'
            'Today\'s Date: " + strftime_now(\'%B %d, %Y\') + ".\n'
            'You are Granite, developed by IBM." %}\n'
            '    {%- if tools and documents %}\n'
            '        {%- set system_message = system_message + " You are a helpful AI assistant with access to the following tools. When a tool is required to answer the user\'s query, respond with <|tool_call|> followed by a JSON list of tools used. If a tool does not exist in the provided list of tools, notify the user that you do not have the ability to fulfill the request.\n'
            '\n'
            'Write the response to the user\'s input by strictly aligning with the facts in the provided documents. If the information needed to answer the question is not available in the documents, inform the user that the question cannot be answered based on the available data." %}\n'
            '    {%- elif tools %}\n'
            '        {%- set system_message = system_message + " You are a helpful AI assistant with access to the following tools. When a tool is required to answer the user\'s query, respond with <|tool_call|> followed by a JSON list of tools used. If a tool does not exist in the provided list of tools, notify the user that you do not have the ability to fulfill the request." %}\n'
            '    {%- elif documents %}\n'
            '        {%- set system_message = system_message + " Write the response to the user\'s input by strictly aligning with the facts in the provided documents. If the information needed to answer the question is not available in the documents, inform the user that the question cannot be answered based on the available data." %}\n'
            '    {%- elif thinking %}\n'
            '    {%- set system_message = system_message + " You are a helpful AI assistant.\n'
            'Respond to every user query in a comprehensive and detailed way. You can write down your thoughts and reasoning process before responding. In the thought process, engage in a comprehensive cycle of analysis, summarization, exploration, reassessment, reflection, backtracing, and iteration to develop well-considered thinking process. In the response section, based on various attempts, explorations, and reflections from the thoughts section, systematically present the final solution that you deem correct. The response should summarize the thought process. Write your thoughts after \'Here is my thought process:\' and write your response after \'Here is my response:\' for each user query." %}\n'
            '    {%- else %}\n'
            '        {%- set system_message = system_message + " You are a helpful AI assistant." %}    \n'
            '    {%- endif %}\n'
            "    {%- if 'citations' in controls and documents %}\n"
            "        {%- set system_message = system_message + '\n"
            '\n'
            "In your response, use the symbols <co> and </co> to indicate when a fact comes from a document in the search result, e.g <co>0</co> for a fact from document 0. Afterwards, list all the citations with their corresponding documents in an ordered list.' %}\n"
            '    {%- endif %}\n'
            "    {%- if 'hallucinations' in controls and documents %}\n"
            "        {%- set system_message = system_message + '\n"
            '\n'
            "Finally, after the response is written, include a numbered list of sentences from the response that are potentially hallucinated and not based in the documents.' %}\n"
            '    {%- endif %}\n'
            '    {%- set loop_messages = messages %}\n'
            '{%- endif %}\n'
            "{{- '<|start_of_role|>system<|end_of_role|>' + system_message + '<|end_of_text|>\n"
            "' }}\n"
            '{%- if tools %}\n'
            "    {{- '<|start_of_role|>tools<|end_of_role|>' }}\n"
            '    {{- tools | tojson(indent=4) }}\n'
            "    {{- '<|end_of_text|>\n"
            "' }}\n"
            '{%- endif %}\n'
            '{%- if documents %}\n'
            "    {{- '<|start_of_role|>documents<|end_of_role|>' }}\n"
            '    {%- for document in documents %}\n'
            "        {{- 'Document ' + loop.index0 | string + '\n"
            "' }}\n"
            "        {{- document['text'] }}\n"
            '        {%- if not loop.last %}\n'
            "            {{- '\n"
            '\n'
            "'}}\n"
            '        {%- endif%}\n'
            '    {%- endfor %}\n'
            "    {{- '<|end_of_text|>\n"
            "' }}\n"
            '{%- endif %}\n'
            '{%- for message in loop_messages %}\n'
            "    {{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + '<|end_of_text|>\n"
            "' }}\n"
            '    {%- if loop.last and add_generation_prompt %}\n'
            "        {{- '<|start_of_role|>assistant' }}\n"
            '            {%- if controls %}\n'
            "                {{- ' ' + controls | tojson()}}\n"
            '            {%- endif %}\n'
            "        {{- '<|end_of_role|>' }}\n"
            '    {%- endif %}\n'
            '{%- endfor %}'
        ),
    },
    {
        "key": 'falcon3',
        "family": 'falcon3',
        "model": 'tiiuae/Falcon3-7B-Instruct',
        "source": 'optimum-intel optimum/exporters/openvino/utils.py COMPLEX_CHAT_TEMPLATES',
        "bos": '<|endoftext|>',
        "eos": '<|endoftext|>',
        "template": (
            '{%- if tools %}\n'
            "{{- '<|system|>\\n' }}\n"
            "{%- if messages[0]['role'] == 'system' %}\n"
            "{{- messages[0]['content'] }}\n"
            '{%- set remaining_messages = messages[1:] %}\n'
            '{%- else %}\n'
            '{%- set remaining_messages = messages %}\n'
            '{%- endif %}\n'
            '{{- \'You are a Falcon assistant skilled in function calling. You are helpful, respectful, and concise.\\n\\n# Tools\\n\\nYou have access to the following functions. You MUST use them to answer questions when needed. For each function call, you MUST return a JSON object inside <tool_call></tool_call> tags.\\n\\n<tools>\' + tools|tojson(indent=2) + \'</tools>\\n\\n# Output Format\\n\\nYour response MUST follow this format when making function calls:\\n<tool_call>\\n[\\n  {"name": "function_name", "arguments": {"arg1": "value1", "arg2": "value2"}},\\n  {"name": "another_function", "arguments": {"arg": "value"}}\\n]\\n</tool_call>\\nIf no function calls are needed, respond normally without the tool_call tags.\\n\' }}\n'
            '{%- for message in remaining_messages %}\n'
            "{%- if message['role'] == 'user' %}\n"
            "{{- '<|user|>\\n' + message['content'] + '\\n' }}\n"
            "{%- elif message['role'] == 'assistant' %}\n"
            '{%- if message.content %}\n'
            "{{- '<|assistant|>\\n' + message['content'] }}\n"
            '{%- endif %}\n'
            '{%- if message.tool_calls %}\n'
            "{{- '\\n<tool_call>\\n' }}\n"
            '{{- message.tool_calls|tojson(indent=2) }}\n'
            "{{- '\\n</tool_call>' }}\n"
            '{%- endif %}\n'
            "{{- eos_token + '\\n' }}\n"
            "{%- elif message['role'] == 'tool' %}\n"
            "{{- '<|assistant|>\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>\\n' }}\n"
            '{%- endif %}\n'
            '{%- endfor %}\n'
            "{{- '<|assistant|>\\n' if add_generation_prompt }}\n"
            '{%- else %}\n'
            '{%- for message in messages %}\n'
            "{%- if message['role'] == 'system' %}\n"
            "{{- '<|system|>\\n' + message['content'] + '\\n' }}\n"
            "{%- elif message['role'] == 'user' %}\n"
            "{{- '<|user|>\\n' + message['content'] + '\\n' }}\n"
            "{%- elif message['role'] == 'assistant' %}\n"
            '{%- if not loop.last %}\n'
            "{{- '<|assistant|>\\n' + message['content'] + eos_token + '\\n' }}\n"
            '{%- else %}\n'
            "{{- '<|assistant|>\\n' + message['content'] + eos_token }}\n"
            '{%- endif %}\n'
            '{%- endif %}\n'
            '{%- if loop.last and add_generation_prompt %}\n'
            "{{- '<|assistant|>\\n' }}\n"
            '{%- endif %}\n'
            '{%- endfor %}\n'
            '{%- endif %}'
        ),
    },
    {
        "key": 'exaone-3.5',
        "family": 'exaone3',
        "model": 'LGAI-EXAONE/EXAONE-3.5-7.8B-Instruct',
        "source": "the GGUF of ollama's exaone3.5:7.8b (huggingface.js ollama-utils)",
        "bos": '[BOS]',
        "eos": '[|endofturn|]',
        "template": (
            "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}{{ '[|system|][|endofturn|]\n"
            "' }}{% endif %}{{ '[|' + message['role'] + '|]' + message['content'] }}{% if message['role'] == 'user' %}{{ '\n"
            "' }}{% else %}{{ '[|endofturn|]\n"
            "' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '[|assistant|]' }}{% endif %}"
        ),
    },
]
