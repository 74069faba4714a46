"""``manage.py api_token create|revoke|list [--user NAME]``: REST API tokens (docs/api.md).

``create --user NAME`` prints a new token for the user (refused when they have one, unless
``--replace``: the old token then stops working); ``revoke --user NAME`` deletes it; ``list``
prints every user with a token (user name, when it was created, the key's first four characters).
The key is printed once, by ``create``: the database keeps only its digest (django-rest-knox)."""
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from knox.models import AuthToken

from api.account import create_token, revoke_token


class Command(BaseCommand):
    help = "Create, revoke or list REST API tokens (Authorization: Token <key>)."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["create", "revoke", "list"])
        parser.add_argument("--user", metavar="NAME", help="user name (create, revoke)")
        parser.add_argument("--replace", action="store_true", help="create: replace an existing token")

    def handle(self, *args, action, user, replace, **options):
        if action == "list":
            for token in AuthToken.objects.select_related("user").order_by("user__username", "-created"):
                self.stdout.write(f"{token.user.get_username()}\t{token.created:%Y-%m-%d %H:%M} UTC\t{token.token_key[:4]}...")
            return
        if not user:
            raise CommandError(f"{action} needs --user NAME")
        account = get_user_model().objects.filter(username=user).first()
        if account is None:
            raise CommandError(f"no user named {user!r}")
        if action == "create":
            if not account.is_active:
                raise CommandError(f"user {user!r} is inactive: an inactive user's token is refused")
            if AuthToken.objects.filter(user=account).exists() and not replace:
                raise CommandError(f"user {user!r} already has a token; revoke it or use --replace")
            self.stdout.write(create_token(account))
        elif not revoke_token(account):
            raise CommandError(f"user {user!r} has no token")
        else:
            self.stdout.write(f"revoked the token of {user!r}")
