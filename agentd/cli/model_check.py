"""Does this key reach this model at this endpoint? The cheapest call that answers it.

Anthropic's API, a proxy, a gateway and a compatible server all answer `POST /v1/messages`;
not all of them answer `GET /v1/models`. So the model list is asked first (free, and it is
what a newcomer picks from), and one message of one token is sent only when there is no list,
or when the list does not name the model (a gateway may serve more than it lists). Each
failure says which of the key, the model or the base URL is wrong, and the listed models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from agentd.ledger.pricing import Tokens

if TYPE_CHECKING:
    import anthropic

DEFAULT_BASE_URL = "https://api.anthropic.com"
TIMEOUT = 20.0
Fault = Literal["key", "model", "base_url", "endpoint"]


class ModelProblem(Exception):
    """The check failed. `fault` says what to change: a new key, a model from `listed`, the
    base URL, or nothing the owner typed (the endpoint itself answered with an error)."""

    def __init__(self, message: str, fault: Fault, listed: list[str] | None = None) -> None:
        super().__init__(message)
        self.fault = fault
        self.listed = listed or []

    @property
    def key_fault(self) -> bool:
        return self.fault == "key"


@dataclass
class ModelOk:
    """The key and the model work; `listed` is what the endpoint listed ([] without a list)."""

    how: Literal["listed", "message"]
    listed: list[str]
    spent: Tokens | None = None  # what the one-token message cost (None: none was sent)


def check_model(base_url: str, key: str, model: str) -> ModelOk:
    """Raise ModelProblem unless `key` can use `model` at `base_url` ("" is Anthropic's)."""
    if not key:
        raise ModelProblem("the key is empty", "key")
    try:
        import anthropic
    except ImportError:  # agentd's own dependency; missing only from a broken install
        raise ModelProblem(
            "the anthropic package is not installed; run `pip install anthropic` in agentd's "
            "environment, or pass --skip-model-check",
            "endpoint",
        ) from None
    base = (base_url or DEFAULT_BASE_URL).rstrip("/")
    client = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0, timeout=TIMEOUT)
    with client:
        listed, anthropic_shaped = _listed(client, base) or ([], False)
        # An OpenAI-style list (vLLM, Ollama) proves nothing about /v1/messages: ask it.
        if anthropic_shaped and _names(model, listed):
            return ModelOk("listed", listed)
        spent = _one_token(client, base, model, listed)
    return ModelOk("message", listed, spent)


def _names(model: str, listed: list[str]) -> bool:
    """Whether the list names the model: its id, or the dated id an alias stands for
    (Anthropic lists claude-haiku-4-5-20251001 and answers to claude-haiku-4-5)."""
    return any(_same(model, m) for m in listed)


def _same(model: str, listed_id: str) -> bool:
    """The id itself, or the alias's dated id (`-YYYYMMDD`; claude-sonnet-4 is not 4-5)."""
    date = listed_id.removeprefix(f"{model}-")
    return listed_id == model or (date != listed_id and len(date) == 8 and date.isdecimal())


def other_models(model: str, listed: list[str]) -> list[str]:
    """The listed models other than this one, which is not offered again under its dated id."""
    return [m for m in listed if not _same(model, m)]


def _listed(client: anthropic.Anthropic, base: str) -> tuple[list[str], bool] | None:
    """The endpoint's model ids and whether the list is the Messages API's own (its entries
    are `"type": "model"`); None where it has no list (any answer but a refused key)."""
    import anthropic

    try:
        models = list(client.models.list(limit=1000))
        return [str(m.id) for m in models], all(m.type == "model" for m in models)
    except (anthropic.AuthenticationError, anthropic.PermissionDeniedError) as exc:
        raise _key_refused(base, exc) from None
    except anthropic.APIConnectionError as exc:
        raise _unreachable(base, exc) from None
    except (anthropic.APIError, ValueError, TypeError, AttributeError):
        return None  # no such route, or not the list's shape: the message decides


def _one_token(client: anthropic.Anthropic, base: str, model: str, listed: list[str]) -> Tokens:
    """Send one message of one token; what it cost, as the API reported it."""
    import anthropic

    try:
        reply = client.messages.create(
            model=model, max_tokens=1, messages=[{"role": "user", "content": "ping"}]
        )
    except (anthropic.AuthenticationError, anthropic.PermissionDeniedError) as exc:
        raise _key_refused(base, exc) from None
    except anthropic.APIConnectionError as exc:
        raise _unreachable(base, exc) from None
    except (anthropic.NotFoundError, anthropic.BadRequestError) as exc:
        raise _refused(base, model, listed, exc) from None
    except anthropic.APIStatusError as exc:
        raise ModelProblem(
            f"{base} answered HTTP {exc.status_code} ({_said(exc)}) to a one-token message; "
            "try again later, or pass --skip-model-check to write the config unchecked",
            "endpoint",
            listed,
        ) from None
    except (anthropic.APIError, ValueError, TypeError) as exc:
        raise _not_the_api(base, f"an answer agentd cannot read ({type(exc).__name__})") from None
    if getattr(reply, "type", None) != "message":  # a web page answers 200 to anything
        raise _not_the_api(base, "HTTP 200, but not a message")
    return _tokens(getattr(reply, "usage", None))


def _tokens(reported: Any) -> Tokens:
    """The SDK's usage object as the ledger counts it (a field the server left out: 0)."""

    def count(name: str) -> int:
        value = getattr(reported, name, 0)
        return value if isinstance(value, int) else 0

    return Tokens(
        input_tokens=count("input_tokens"),
        output_tokens=count("output_tokens"),
        cache_read_tokens=count("cache_read_input_tokens"),
        cache_write_tokens=count("cache_creation_input_tokens"),
    )


def _refused(base: str, model: str, listed: list[str], exc: anthropic.APIStatusError) -> Exception:
    """A 404 or 400 to the message: the model, when the API's error says so; else the URL."""
    said = _said(exc)
    others = other_models(model, listed)  # listed but refused: never offered again
    # The API names the model when it refuses one; a 404 that does not is a route the URL
    # lacks (an OpenAI-style server, a base URL with one /v1 too many), whatever it lists.
    if _api_error(exc) and ("model" in said.lower() or model in said):
        return ModelProblem(f"{base} refused the model {model} ({said})", "model", others)
    return _not_the_api(base, f"HTTP {exc.status_code} for /v1/messages: {said}")


def _api_error(exc: anthropic.APIStatusError) -> bool:
    """Whether the answer is the API's own error body, not a web server's page."""
    body: Any = exc.body
    return isinstance(body, dict) and isinstance(body.get("error", body), dict)


def _said(exc: anthropic.APIStatusError) -> str:
    body: Any = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:200]
    return f"HTTP {exc.status_code}"


def _key_refused(base: str, exc: anthropic.APIStatusError) -> ModelProblem:
    where = "Anthropic" if base == DEFAULT_BASE_URL else base
    return ModelProblem(f"{where} rejected the key ({_said(exc)})", "key")


def _unreachable(base: str, exc: Exception) -> ModelProblem:
    return ModelProblem(
        f"{base} is unreachable ({type(exc).__name__}); check the network or --llm-base-url",
        "base_url",
    )


def _not_the_api(base: str, what: str) -> ModelProblem:
    return ModelProblem(
        f"{base} does not answer like the Anthropic API ({what}); check "
        "--llm-base-url: the URL before /v1/messages",
        "base_url",
    )


def refusal_advice(problem: ModelProblem, model: str) -> str:
    """What to do about a refused model, with the endpoint's own list (never a guess)."""
    if problem.listed:
        names = ", ".join(problem.listed)
        return f"{problem}; it lists: {names}. Pass --model with one of them"
    return (
        f"{problem}; it listed no other model to choose from. Pass --model with a model id "
        "this endpoint serves (its documentation names them)"
    )
