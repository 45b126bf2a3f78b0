"""Tools for the console tests: a read-only lookup, a failing read, two destructive calls."""

from __future__ import annotations

from pydantic import BaseModel, Field

from planexec.testing import fake_tool


class Payment(BaseModel):
    account: str
    amount: int = Field(ge=1, le=1000, description="at most 1000 a payment")


TOOLS = [
    fake_tool(
        "accounts", {"items": [{"id": "ACC-7"}]}, args={"site": str}, hints={"read_only": True}
    ),
    fake_tool(
        "ledger",
        args={"site": str},
        error=LookupError("the ledger of MAIN is offline"),
        hints={"read_only": True},
    ),
    fake_tool("pay", {"paid": True}, args=Payment, hints={"destructive": True}),
    fake_tool(
        "close_account", {"closed": True}, args={"account": str}, hints={"destructive": True}
    ),
]

PLANS = {
    "failed": '#Step1: read the ledger\n#Tool1: ledger\n#Args1: {"site": "MAIN"}\n',
    "pay": (
        '#Step1: find the account\n#Tool1: accounts\n#Args1: {"site": "MAIN"}\n'
        "#Dependency1: None\n\n"
        "#Step2: pay it\n#Tool2: pay\n"
        '#Args2: {"account": "{step_1.items[0].id}", "amount": 100}\n#Dependency2: #S1\n'
    ),
    "close": '#Step1: close it\n#Tool1: close_account\n#Args1: {"account": "ACC-9"}\n',
}
