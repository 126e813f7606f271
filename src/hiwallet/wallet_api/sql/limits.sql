-- What an account used this month of each monthly limit (wallet_api/limits.py).

-- name: usage_of_month
SELECT kind, currency, used FROM wallet.limit_usage
 WHERE bucket = $1 AND account_id = $2 AND month = $3
