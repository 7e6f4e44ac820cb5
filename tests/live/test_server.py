"""Smoke test: each live server answers a chat completion through the openai client."""


def test_server_answers_a_chat_completion(live_client, smollm2_server):
    response = live_client.chat.completions.create(
        model=smollm2_server.model, messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=8, temperature=0)
    message = response.choices[0].message
    assert message.role == "assistant"
    assert isinstance(message.content, str) and message.content
    assert response.usage.prompt_tokens > 0
