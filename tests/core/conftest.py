"""Fixtures shared by the proposer tests of this folder."""

import pytest
from fake_llm_server import FakeLLMServer


@pytest.fixture
def server():
    """The scripted local chat server (OpenAI and Anthropic wire formats) on 127.0.0.1."""
    srv = FakeLLMServer().start()
    yield srv
    srv.stop()
